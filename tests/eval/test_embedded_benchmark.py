"""The embedded world as an eval benchmark: the demo's records at a seed, its recognition ceiling
and deciding cells as benchmark facts and a scorer metric, typed rules, `--heads public`, and the
demo's options mapped onto eval settings. No model is loaded."""

from __future__ import annotations

import numpy as np
import pytest
from click.testing import CliRunner

from dpmtv.cli import main
from dpmtv.demo.config import default_config, eval_settings
from dpmtv.embedded import generator as gen
from dpmtv.embedded.recognition import recognition_ceiling
from dpmtv.embedded.suite import task_codes, task_records
from dpmtv.errors import ParameterError
from dpmtv.eval.benchmarks import LoadOptions, load_benchmark
from dpmtv.eval.benchmarks.embedded import public_selection, recognition_lines, share_with_deciding_demo
from dpmtv.eval.methods import icl_demonstrations


def test_the_benchmark_is_the_demos_records_at_the_split_seed_with_their_ceiling():
    benchmark = load_benchmark(
        "embedded:is_green", options=LoadOptions(max_train=40, max_test=30, split_seed=2)
    )
    task = gen.get_task("is_green")
    for split, records in (("private", benchmark.train), ("test", benchmark.test)):
        expected = task_records(task, len(records), seed=2, split=split)
        assert [(r.record_id, r.answer) for r in records] == [(r.record_id, r.answer) for r in expected]
    ceiling = recognition_ceiling(task, task_codes(task, 30, seed=2, split="test"))
    described = benchmark.describe()
    assert described["group"] == "held_out" and described["trained"] is False
    assert described["ceiling"] == {"rule": ceiling.rule, "accuracy": ceiling.accuracy}
    assert described["deciding_cells"] == ceiling.deciding_cells()
    deciding = [r for r, d in zip(benchmark.test, ceiling.deciding_queries, strict=True) if d]
    assert described["deciding_count"] == len(deciding) == int(ceiling.deciding_queries.sum())
    assert benchmark.scorer.score(deciding[0], deciding[0].answer)["deciding_accuracy"] == 1.0
    assert "deciding_accuracy" in described["metrics"]
    assert "in_deciding_cell" not in described  # a fact about the private pool stays out of reports


def test_typed_rules_and_label_maps_are_benchmarks_and_a_bad_name_says_both():
    rule = load_benchmark("embedded:red xor circle xor big", options=LoadOptions(max_train=8, max_test=8))
    assert rule.details["group"] == "rules" and rule.details["held_out"]
    assert (
        load_benchmark("embedded:map_colour", options=LoadOptions(max_train=8, max_test=8)).details["group"]
        == "label_maps"
    )
    with pytest.raises(ParameterError, match="unknown embedded task 'purple'.*nor a rule.*unknown word"):
        load_benchmark("embedded:purple")


def test_share_of_prompts_with_a_deciding_demonstration_by_hand():
    benchmark = load_benchmark("embedded:is_green", options=LoadOptions(max_train=64, max_test=8))
    flags = benchmark.train_annotations["in_deciding_cell"]
    inside, outside = int(np.flatnonzero(flags)[0]), int(np.flatnonzero(~flags)[0])
    picks = [np.array([inside, outside]), np.array([outside]), np.array([outside, outside])]
    assert share_with_deciding_demo(benchmark, picks) == pytest.approx(1 / 3)


def test_icl_demonstrations_are_seeded_and_without_replacement_per_prompt():
    picks = icl_demonstrations(20, 5, 16, seed=3)
    assert all(len(set(p.tolist())) == 16 for p in picks)
    assert [p.tolist() for p in picks] == [p.tolist() for p in icl_demonstrations(20, 5, 16, seed=3)]
    assert picks[0].tolist() != icl_demonstrations(20, 5, 16, seed=4)[0].tolist()


def test_the_report_section_names_the_ceiling_and_the_deciding_queries():
    benchmark = load_benchmark("embedded:is_green", options=LoadOptions(max_train=8, max_test=64))
    (title, _, line, _) = recognition_lines(benchmark.describe())
    assert title == "## Recognition" and benchmark.details["ceiling"]["rule"] in line
    assert line.endswith(f"`deciding_accuracy`: {benchmark.details['deciding_count']}.")
    assert recognition_lines({"name": "vizwiz"}) == []


def test_heads_public_needs_the_embedded_benchmark_and_brings_its_clip_norms(tmp_path):
    def run(*args):
        base = ["eval", "--methods", "zero-shot,dp-mtv", "--out", str(tmp_path / "o")]
        return CliRunner().invoke(main, [*base, *args])

    result = run("--benchmark", "embedded:is_green", "--heads", "public", "--l2-clip-norm", "2")
    assert result.exit_code != 0 and "leave out --l2-clip-norm" in result.output
    result = run("--benchmark", "embedded:red xor circle xor big", "--heads", "public")
    assert result.exit_code != 0 and "no public selection ships for the typed rule" in result.output
    heads, clip = public_selection("is_green")
    assert len({layer for layer, _ in heads}) == len(clip)  # one clip norm per released layer
    assert public_selection("is_green", shared=True) == public_selection("no_such_task")


def test_the_demo_maps_onto_eval_settings():
    config = default_config(quick=False)
    settings = eval_settings(config, ("zero-shot", "icl:16", "mtv", "dp-mtv"), 2, (1.5, 2.5), batch_size=64)
    assert [m.label for m in settings.methods] == ["zero-shot", "icl:16", "mtv", "dp-mtv"]
    assert settings.seeds == (2,) and settings.epsilons == config.epsilons and settings.delta == config.delta
    assert settings.evaluated_epsilons == sorted(config.epsilons)  # no extra ε for a queries plot
    assert settings.l2_clip_norm == (1.5, 2.5) and settings.shots_per_chunk == config.shots_per_chunk
    assert settings.max_new_tokens == 1 and settings.allow_non_private
