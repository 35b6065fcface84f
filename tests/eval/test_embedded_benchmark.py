"""The embedded world as an eval benchmark: the demo's records at a seed, its recognition ceiling
and deciding cells as benchmark facts and a scorer metric, what ICL's demonstrations hold, typed
rules, `--heads public`, and the demo's options mapped onto eval settings. One test runs `dpmtv
eval` on the embedded model; the others load no model."""

from __future__ import annotations

import json

import numpy as np
import pytest
from click.testing import CliRunner

from dpmtv.cli import main
from dpmtv.demo.config import default_config, eval_settings
from dpmtv.embedded import bayes
from dpmtv.embedded import generator as gen
from dpmtv.embedded.recognition import recognition_ceiling
from dpmtv.embedded.suite import task_codes, task_records
from dpmtv.embedded.world import combo_index
from dpmtv.errors import ParameterError
from dpmtv.eval.benchmarks import LoadOptions, load_benchmark
from dpmtv.eval.benchmarks.embedded import public_selection, recognition_lines
from dpmtv.eval.methods import icl_demonstrations
from tests._markdown import assert_tables_valid


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
    benchmark = load_benchmark("embedded:is_green", options=LoadOptions(max_train=64, max_test=3))
    task = gen.get_task("is_green")
    ceiling = recognition_ceiling(task, task_codes(task, 3, seed=0, split="test"))
    train_rows = combo_index(task_codes(task, 64, seed=0, split="private"))
    flags = np.isin(train_rows, ceiling.deciding_rows)  # from the generator, not the benchmark
    inside, outside = int(np.flatnonzero(flags)[0]), int(np.flatnonzero(~flags)[0])
    picks = [np.array([inside, outside]), np.array([outside, outside]), np.array([outside, outside])]
    facts = benchmark.demonstration_facts(picks, benchmark.test)
    assert facts["demos_with_deciding_cell"] == pytest.approx(1 / 3)
    assert set(facts["demonstration_references"]) == set(bayes.LEARNERS)
    label_map = load_benchmark("embedded:map_colour", options=LoadOptions(max_train=8, max_test=3))
    assert "demonstration_references" not in label_map.demonstration_facts(picks[1:2] * 3, label_map.test)


def test_eval_reports_what_the_demonstrations_could_teach(tmp_path):
    """`dpmtv eval --benchmark embedded:TASK` with ICL: each ICL run carries the Bayes learners'
    accuracy on its very demonstrations, and the report shows them; other methods carry none."""
    out = tmp_path / "eval"
    args = ["eval", "--benchmark", "embedded:big_and_left", "--model", "embedded",
            "--methods", "zero-shot,icl:4", "--non-private", "--seeds", "2", "--max-train", "32",
            "--max-queries", "12", "--out", str(out)]  # fmt: skip
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    runs = json.loads((out / "results.json").read_text())["runs"]
    icl = [r for r in runs if r["method"] == "icl:4"]
    assert len(icl) == 2 and all("demonstration_references" not in r["details"] for r in runs if r not in icl)
    benchmark = load_benchmark("embedded:big_and_left", options=LoadOptions(max_train=32, max_test=12))
    for run in icl:
        picks = icl_demonstrations(32, 12, 4, run["seed"])
        assert (
            run["details"]["demonstration_references"]
            == benchmark.demonstration_facts(picks, benchmark.test)["demonstration_references"]
        )
    report = (out / "report.md").read_text()
    assert "## What the demonstrations could teach" in report
    assert_tables_valid(report)
    section = report.split("## What the demonstrations could teach")[1].split("\n## ")[0]
    table = [line for line in section.splitlines() if line.startswith("| ICL 4-shot")]
    assert [line.split(" | ")[2] for line in table] == list(bayes.LEARNERS)


def test_icl_demonstrations_are_seeded_and_without_replacement_per_prompt():
    picks = icl_demonstrations(20, 5, 16, seed=3)
    assert all(len(set(p.tolist())) == 16 for p in picks)
    assert [p.tolist() for p in picks] == [p.tolist() for p in icl_demonstrations(20, 5, 16, seed=3)]
    assert picks[0].tolist() != icl_demonstrations(20, 5, 16, seed=4)[0].tolist()


def test_the_report_section_names_the_ceiling_and_the_deciding_queries():
    benchmark = load_benchmark("embedded:is_green", options=LoadOptions(max_train=8, max_test=64))
    (title, _, line, _) = recognition_lines(benchmark.describe())
    assert title == "## What recognising a trained rule would score"
    assert benchmark.details["ceiling"]["rule"] in line
    assert f"{benchmark.details['ceiling']['accuracy']:.3f} of the test queries" in line
    assert f"the {benchmark.details['deciding_count']} test queries in them" in line
    assert "ceiling" not in line
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
