"""Bad record files: each case gets one clear RecordError naming the file, line and field
(docs/faults.md lists every case)."""

from __future__ import annotations

import json
import os

import pytest
from PIL import Image

from dpmtv.data import load_records
from dpmtv.errors import RecordError
from tests.conftest import write_records


def _write_jsonl(path, rows):
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def test_csv_with_a_byte_order_mark_keeps_its_first_column(tmp_path):
    write_records(tmp_path, 1)
    (tmp_path / "r.csv").write_text("id,image,question,answer\nx1,img/0.png,q,a\n", encoding="utf-8-sig")
    (record,) = load_records(tmp_path / "r.csv")
    assert record.record_id == "x1" and record.has_explicit_id


@pytest.mark.parametrize("answer", [True, float("nan"), 2.5, None, {"a": 1}])
def test_non_text_answers_are_refused_with_the_record_named(tmp_path, answer):
    write_records(tmp_path, 1)
    path = tmp_path / "r.jsonl"
    path.write_text(json.dumps({"image": "img/0.png", "question": "q", "answer": answer}) + "\n")
    with pytest.raises(RecordError, match=r"r\.jsonl:1: (field 'answer'|missing field 'answer')"):
        load_records(path)


def test_integer_answers_are_converted_to_their_decimal_text(tmp_path):
    write_records(tmp_path, 1)
    path = _write_jsonl(tmp_path / "r.jsonl", [{"image": "img/0.png", "question": "how many?", "answer": 3}])
    assert load_records(path)[0].answer == "3"


def test_non_utf8_jsonl_names_the_encoding_and_line(tmp_path):
    write_records(tmp_path, 1)
    good = json.dumps({"image": "img/0.png", "question": "q", "answer": "a"}).encode()
    bad = json.dumps({"image": "img/0.png", "question": "caf\u00e9", "answer": "a"}).encode("latin-1")
    bad = bad.replace(b"\\u00e9", "\u00e9".encode("latin-1"))
    (tmp_path / "r.jsonl").write_bytes(good + b"\n" + bad + b"\n")
    with pytest.raises(RecordError, match=r"r\.jsonl:2: not valid UTF-8"):
        load_records(tmp_path / "r.jsonl")


def test_csv_image_cell_may_be_a_json_list_for_paths_with_semicolons(tmp_path):
    write_records(tmp_path, 1)
    Image.new("RGB", (8, 8)).save(tmp_path / "img" / "a;b.png")
    (tmp_path / "r.csv").write_text('image,question,answer\n"[""img/a;b.png"", ""img/0.png""]",q,a\n')
    (record,) = load_records(tmp_path / "r.csv")
    assert [path.name for path in record.images] == ["a;b.png", "0.png"]


def test_a_symlink_loop_is_a_record_error(tmp_path):
    write_records(tmp_path, 1)
    os.symlink(tmp_path / "loop", tmp_path / "loop")
    path = _write_jsonl(tmp_path / "r.jsonl", [{"image": "loop", "question": "q", "answer": "a"}])
    with pytest.raises(RecordError, match=r"r\.jsonl:1: field 'image'"):
        load_records(path)


def test_a_decompression_bomb_names_the_limit_and_how_to_raise_it(tmp_path, monkeypatch):
    write_records(tmp_path, 1)
    Image.new("1", (4000, 4000)).save(tmp_path / "big.png")  # 16 Mpx, a few kB on disk
    monkeypatch.setenv("DPMTV_MAX_IMAGE_PIXELS", "1000000")
    path = _write_jsonl(tmp_path / "r.jsonl", [{"image": "big.png", "question": "q", "answer": "a"}])
    with pytest.raises(
        RecordError, match=r"r\.jsonl:1: field 'image'.*16000000 pixels.*DPMTV_MAX_IMAGE_PIXELS"
    ):
        load_records(path)


def test_a_datasets_dict_with_one_split_is_used(tmp_path):
    datasets = pytest.importorskip("datasets")
    image = Image.new("RGB", (12, 12))
    split = datasets.Dataset.from_dict(
        {"image": [image], "question": ["q"], "answer": ["a"]},
        features=datasets.Features(
            {
                "image": datasets.Image(),
                "question": datasets.Value("string"),
                "answer": datasets.Value("string"),
            }
        ),
    )
    datasets.DatasetDict({"train": split}).save_to_disk(str(tmp_path / "ds"))
    assert [record.answer for record in load_records(tmp_path / "ds")] == ["a"]


def test_a_datasets_dict_with_two_splits_names_them(tmp_path):
    datasets = pytest.importorskip("datasets")
    split = datasets.Dataset.from_dict({"image": ["x"], "question": ["q"], "answer": ["a"]})
    datasets.DatasetDict({"train": split, "test": split}).save_to_disk(str(tmp_path / "ds"))
    with pytest.raises(RecordError, match=r"holds 2 splits \(train, test\)"):
        load_records(tmp_path / "ds")
