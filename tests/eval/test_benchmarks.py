"""Benchmark loaders on tiny fixture copies of each published layout."""

from __future__ import annotations

import json
import pickle
from pathlib import Path

import numpy as np
import pytest

from dpmtv.errors import ParameterError, RecordError
from dpmtv.eval.benchmarks import BENCHMARKS, LoadOptions, benchmark_names, load_benchmark, load_record_files
from dpmtv.eval.benchmarks.base import most_common_normalised
from dpmtv.eval.benchmarks.flower_names import FLOWER_NAMES
from tests.conftest import write_records
from tests.eval.fixtures import WRITERS

# name -> (demonstrations, queries, primary metric, a file to delete for the missing-file test)
EXPECTED = {
    "vizwiz": (6, 3, "vqa_accuracy", "Annotations/val.json"),
    "ok-vqa": (5, 3, "vqa_accuracy", "mscoco_val2014_annotations.json"),
    "flowers102": (7, 5, "accuracy", "setid.mat"),
    "cub-200": (7, 5, "accuracy", "CUB_200_2011/classes.txt"),
    "dtd": (7, 5, "accuracy", "dtd/labels/test1.txt"),
    "vqa-rad": (6, 4, "closed_accuracy", "VQA_RAD Dataset Public.json"),
    "slake": (6, 4, "closed_accuracy", "Slake1.0/test.json"),
    "pathvqa": (6, 4, "closed_accuracy", "pvqa/qas/train/train_qa.pkl"),
}
EPISODES = LoadOptions(max_train=7, max_test=5)


def _load(name: str, root: Path, options: LoadOptions | None = None):
    return load_benchmark(
        name, root=root, options=options or (EPISODES if name in ("flowers102", "cub-200", "dtd") else None)
    )


def test_registry_lists_every_benchmark_including_embedded():
    assert set(EXPECTED) | {"embedded"} == set(benchmark_names()) == set(BENCHMARKS)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_loader_reads_its_published_layout(name, tmp_path):
    n_train, n_test, primary, _ = EXPECTED[name]
    benchmark = _load(name, WRITERS[name](tmp_path))
    assert (len(benchmark.train), len(benchmark.test), benchmark.scorer.primary) == (n_train, n_test, primary)
    for record in (*benchmark.train, *benchmark.test):
        assert record.load_images() and record.question and record.answer
    query = benchmark.test[0]
    assert benchmark.scorer.candidates(query)
    assert set(benchmark.scorer.score(query, query.answer).values()) == {1.0}  # gold scores full marks


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_missing_file_is_named_with_the_expected_layout(name, tmp_path):
    root = WRITERS[name](tmp_path)
    missing = root / EXPECTED[name][3]
    missing.unlink()
    with pytest.raises(RecordError) as info:
        _load(name, root)
    assert str(missing) in str(info.value) and "Expected layout" in str(info.value)


def test_missing_image_is_named(tmp_path):
    root = WRITERS["vizwiz"](tmp_path)
    (root / "val" / "VizWiz_val_00000001.jpg").unlink()
    with pytest.raises(RecordError, match="VizWiz_val_00000001.jpg' does not exist"):
        load_benchmark("vizwiz", root=root)


def test_vqa_answers_demonstration_and_references(tmp_path):
    benchmark = load_benchmark("vizwiz", root=WRITERS["vizwiz"](tmp_path))
    by_id = {r.record_id: r for r in benchmark.test}
    odd = by_id["vizwiz-VizWiz_val_00000001"]
    # references: Two x4, 2 x3, two dogs x3 -> normal forms 2 x7, 2 dogs x3: "2" demonstrates
    assert odd.answer == "2"
    assert "single word or phrase" in odd.question
    assert benchmark.scorer.rule == "vizwiz" and "VizWiz" in benchmark.describe()["scoring"]
    assert benchmark.scorer.score(odd, "2") == {"vqa_accuracy": pytest.approx(0.9)}  # raw "2" x3 only
    okvqa = load_benchmark("ok-vqa", root=WRITERS["ok-vqa"](tmp_path / "ok"))
    assert okvqa.scorer.rule == "vqa"


def test_episodes_are_two_way_one_shot_with_letters(tmp_path):
    benchmark = load_benchmark("flowers102", root=WRITERS["flowers102"](tmp_path), options=EPISODES)
    episode = benchmark.test[0]
    assert len(episode.images) == 3 and episode.answer in ("A", "B")
    options = benchmark.scorer.options[episode.record_id]
    assert all(name.startswith("flower ") for name in options) and options[0] != options[1]
    assert f"(A) {options[0]}" in episode.question and "letter" in episode.question
    train_images = {p for r in benchmark.train for p in r.images}
    assert not train_images & {p for r in benchmark.test for p in r.images}  # published splits kept apart
    again = load_benchmark("flowers102", root=tmp_path, options=EPISODES)
    assert [r.images for r in again.test] == [r.images for r in benchmark.test]  # split seed fixes them


def test_medical_closed_and_open_are_scored_apart(tmp_path):
    benchmark = load_benchmark("vqa-rad", root=WRITERS["vqa-rad"](tmp_path))
    kinds = benchmark.scorer.kinds
    assert sorted(kinds[r.record_id] for r in benchmark.test) == ["closed", "closed", "open", "open"]
    slake = load_benchmark("slake", root=WRITERS["slake"](tmp_path / "s"))
    assert all(r.question.isascii() for r in slake.train)  # English questions only


def test_pathvqa_refuses_a_pickle_that_references_code(tmp_path):
    root = WRITERS["pathvqa"](tmp_path)
    (root / "pvqa/qas/train/train_qa.pkl").write_bytes(pickle.dumps([{"image": Path("x")}]))
    with pytest.raises(RecordError, match="only plain lists/dicts"):
        load_benchmark("pathvqa", root=root)


def test_subsampling_is_seeded_and_bounded(tmp_path):
    root = WRITERS["ok-vqa"](tmp_path)
    a = load_benchmark("okvqa", root=root, options=LoadOptions(max_train=2, max_test=2, split_seed=3))
    b = load_benchmark("ok-vqa", root=root, options=LoadOptions(max_train=2, max_test=2, split_seed=3))
    assert [r.record_id for r in a.train] == [r.record_id for r in b.train] and len(a.test) == 2


def test_registry_errors_are_clear(tmp_path):
    with pytest.raises(ParameterError, match="unknown benchmark 'coco'; known: vizwiz"):
        load_benchmark("coco")
    with pytest.raises(ParameterError, match="--benchmark-root") as info:
        load_benchmark("dtd")
    assert "dtd/images" in str(info.value)


def test_record_files_benchmark(tmp_path):
    private = write_records(tmp_path / "private", 8)
    queries = write_records(tmp_path / "queries", 3, seed=1)
    benchmark = load_record_files(private, queries, LoadOptions())
    assert (len(benchmark.train), len(benchmark.test), benchmark.scorer.primary) == (8, 3, "accuracy")
    assert benchmark.scorer.candidates(benchmark.test[0]) == ("thing 0", "thing 1", "thing 2")


def test_embedded_needs_no_files_or_fails_clearly(monkeypatch):
    benchmark = load_benchmark("embedded:name_colour", options=LoadOptions(max_train=6, max_test=3))
    assert (len(benchmark.train), len(benchmark.test)) == (6, 3)
    assert benchmark.scorer.candidates(benchmark.test[0]) == ("blue", "green", "red", "yellow")
    import dpmtv.embedded.generator as generator

    monkeypatch.delattr(generator, "sample_records")
    with pytest.raises(RecordError, match="needs dpmtv.embedded.generator.sample_records"):
        load_benchmark("embedded")


def test_demonstration_answer_is_the_most_frequent_normalised_one():
    assert most_common_normalised(["Two", "two dogs", "2", "two dogs", "two"]) == "2"  # 3 vs 2
    assert most_common_normalised(["", "", "", "yes"]) == "yes"  # empties never demonstrate
    assert most_common_normalised(["", ""]) == ""


@pytest.mark.parametrize("name", ["vizwiz", "ok-vqa"])
def test_an_empty_annotator_answer_does_not_abort_the_load(name, tmp_path):
    """Failed on the old loader ("missing field 'answer'")."""
    root = WRITERS[name](tmp_path)
    path = root / ("Annotations/val.json" if name == "vizwiz" else "mscoco_val2014_annotations.json")
    content = json.loads(path.read_text())
    rows = content if name == "vizwiz" else content["annotations"]
    rows[0]["answers"][0]["answer"] = ""
    path.write_text(json.dumps(content))
    benchmark = load_benchmark(name, root=root)
    first = benchmark.test[0]
    assert "" in benchmark.scorer.references[first.record_id] and first.answer


def _vqa_rad_with_overlap(root: Path) -> Path:
    path = WRITERS["vqa-rad"](root) / "VQA_RAD Dataset Public.json"
    rows = json.loads(path.read_text())
    train = [r for r in rows if not r["phrase_type"].startswith("test")]
    test = [r for r in rows if r["phrase_type"].startswith("test")]
    leaked = dict(test[0], qid=100, phrase_type="freeform", question=test[0]["question"].upper() + " ")
    repeated = [dict(train[1], qid=101), dict(train[1], qid=102, answer=train[1]["answer"].title())]
    path.write_text(json.dumps([*rows, leaked, *repeated]))
    return root


def test_vqa_rad_drops_training_rows_in_the_test_split_and_repeats(tmp_path):
    """Failed on the old loader (9 training rows instead of 6)."""
    benchmark = load_benchmark("vqa-rad", root=_vqa_rad_with_overlap(tmp_path))
    assert len(benchmark.train) == 6 and len(benchmark.test) == 4
    test_keys = {(r.images[0].name, r.question.casefold(), r.answer.casefold()) for r in benchmark.test}
    assert (
        not {(r.images[0].name, r.question.casefold(), r.answer.casefold()) for r in benchmark.train}
        & test_keys
    )
    assert any(
        "dropped 1 training row(s) that also appear in the test split and 2 repeated" in n
        for n in benchmark.notes
    )


def test_pathvqa_reads_numpy_strings_and_drops_overlap(tmp_path):
    """Failed on the old loader (numpy.str_ refused as a code reference)."""
    root = WRITERS["pathvqa"](tmp_path)
    train_path = root / "pvqa/qas/train/train_qa.pkl"
    rows = pickle.loads(train_path.read_bytes())
    test_row = pickle.loads((root / "pvqa/qas/test/test_qa.pkl").read_bytes())[0]
    (root / "pvqa/images/train" / f"{test_row['image']}.jpg").write_bytes(
        (root / "pvqa/images/test" / f"{test_row['image']}.jpg").read_bytes()
    )
    rows = [{k: np.str_(v) for k, v in row.items()} for row in [*rows, rows[0], test_row]]
    train_path.write_bytes(pickle.dumps(rows, protocol=2))
    benchmark = load_benchmark("pathvqa", root=root)
    assert len(benchmark.train) == 6 and all(type(r.answer) is str for r in benchmark.train)
    assert any("dropped 1 training row(s)" in n and "1 repeated" in n for n in benchmark.notes)
    train_path.write_bytes(pickle.dumps([{"image": np.float64(1.0)}]))
    with pytest.raises(RecordError, match="only string dtypes"):
        load_benchmark("pathvqa", root=root)


def test_torchvision_folder_layouts_and_shipped_flower_names(tmp_path):
    """Failed on the old loaders (flowers-102/ and dtd/dtd/ not found; options 'class N')."""
    flowers = WRITERS["flowers102"](tmp_path / "tv" / "flowers-102")
    (flowers / "cat_to_name.json").unlink()
    benchmark = load_benchmark("flowers102", root=tmp_path / "tv", options=EPISODES)
    names = {name for pair in benchmark.scorer.options.values() for name in pair}
    assert names <= {"pink primrose", "hard-leaved pocket orchid", "canterbury bells"}
    assert FLOWER_NAMES[30] == "sweet william" and len(set(FLOWER_NAMES.values())) == 102
    WRITERS["dtd"](tmp_path / "tv" / "dtd")  # -> tv/dtd/dtd/images ...
    assert len(load_benchmark("dtd", root=tmp_path / "tv", options=EPISODES).test) == 5
