"""The evaluation end to end on the tiny random-weight LLaVA and fixture benchmarks."""

from __future__ import annotations

import json
import math

import pytest
from click.testing import CliRunner
from PIL import Image

from dpmtv.cli import main
from dpmtv.errors import DangerousModeError, ParameterError
from dpmtv.eval import (
    EvalSettings,
    LoadOptions,
    load_record_files,
    parse_methods,
    run_evaluation,
)
from dpmtv.eval.methods import MethodSpec
from dpmtv.eval.stats import t_interval
from tests._markdown import assert_tables_valid
from tests.conftest import write_records
from tests.eval.fixtures import write_vizwiz

FAST = dict(seeds=(0,), max_new_tokens=2, batch_size=8, queries_repeats=2, progress=False)


@pytest.fixture
def record_benchmark(tmp_path):
    private = write_records(tmp_path / "private", 8)
    queries = write_records(tmp_path / "queries", 3, seed=1)
    return load_record_files(private, queries, LoadOptions())


def test_cli_refuses_non_private_methods_without_the_switch(tmp_path):
    data = write_records(tmp_path / "d", 4)
    for methods in ("zero-shot,mtv", "icl:4"):
        out = tmp_path / f"out-{methods}"
        args = ["eval", "--model", str(tmp_path / "no-model"), "--data", str(data), "--eval-data", str(data)]
        result = CliRunner().invoke(main, [*args, "--methods", methods, "--out", str(out)])
        assert result.exit_code == 1, result.output
        assert "--non-private" in result.output and methods.split(",")[-1] in result.output
        assert "Traceback" not in result.output and not out.exists()


def test_runner_refuses_non_private_and_needs_heads_for_vectors(tiny_llava, record_benchmark):
    with pytest.raises(DangerousModeError, match="mtv"):
        run_evaluation(tiny_llava, record_benchmark, EvalSettings(methods=(MethodSpec("mtv"),), **FAST))
    with pytest.raises(ParameterError, match="--heads"):
        run_evaluation(tiny_llava, record_benchmark, EvalSettings(methods=(MethodSpec("dp-mtv"),), **FAST))


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("icl", "needs its number of shots"),
        ("mtv:3", "only icl:K"),
        ("gpt", "unknown method"),
        ("dp-icl,dp-icl", "repeat"),
        ("icl:4:2", "only dp-icl:S:M"),
        ("dp-icl:4:0", "only dp-icl:S:M"),
    ],
)
def test_method_specs(text, message):
    with pytest.raises(ParameterError, match=message):
        parse_methods(text)
    assert [m.label for m in parse_methods("zero-shot, icl:16,dp-icl")] == ["zero-shot", "icl:16", "dp-icl:4"]
    assert parse_methods("dp-icl:4:16")[0] == MethodSpec("dp-icl", 4, 16)


def test_icl_says_when_k_is_cut_to_fit_the_context(tiny_llava, record_benchmark):
    settings = EvalSettings(methods=parse_methods("icl:6"), allow_non_private=True, context_limit=120, **FAST)
    run = run_evaluation(tiny_llava, record_benchmark, settings).runs[0]
    assert run.privacy == "non-private" and "NON-PRIVATE" in run.display
    assert run.details["shots_used_min"] < 6 and "k cut from 6" in run.details["note"]


def test_dp_icl_spends_exactly_its_budget_over_the_queries(tiny_llava, record_benchmark):
    settings = EvalSettings(
        methods=parse_methods("zero-shot,dp-icl:2"), epsilons=(2.0,), queries_grid=(1, 100), **FAST
    )
    results = run_evaluation(tiny_llava, record_benchmark, settings)
    dp = [r for r in results.runs if r.method == "dp-icl:2"]
    assert {r.epsilon for r in dp} == {1.0, 2.0}  # 1.0 added for the queries plot, and marked so
    at_two = next(r for r in dp if r.epsilon == 2.0)
    assert at_two.details["num_queries"] == 3 and at_two.details["num_chunks"] == 4
    assert at_two.details["epsilon_spent"] <= 2.0 and at_two.details["epsilon_spent"] == pytest.approx(
        2.0, rel=1e-4
    )
    assert at_two.details["epsilon_per_query"] < 2.0
    assert "queries plot" in next(r for r in dp if r.epsilon == 1.0).details["extra"]
    curve = results.queries_curve
    assert curve["dp_icl_noise_std"]["dp-icl:2"][0] < curve["dp_icl_noise_std"]["dp-icl:2"][1]
    assert at_two.details["neighbouring_relation"] == curve["dp_icl_relation"]["dp-icl:2"] == "replace-one"
    assert len(curve["dp-icl"]["dp-icl:2"]["0"]) == 2 and curve["dp-mtv"] == {}


def test_subsampled_dp_icl_is_accounted_with_amplification_under_add_remove(tiny_llava, record_benchmark):
    settings = EvalSettings(
        methods=parse_methods("dp-icl:2:3"),
        epsilons=(2.0,),
        queries_grid=(1, 10),
        dp_icl_sampling_rate=0.5,
        **FAST,
    )
    results = run_evaluation(tiny_llava, record_benchmark, settings)
    at_two = next(r for r in results.runs if r.epsilon == 2.0)
    d = at_two.details
    assert d["neighbouring_relation"] == "add-remove-one" and d["num_chunks"] == 3
    assert d["sampling_probability"] == 0.5  # the public rate, not M·S/N
    assert d["epsilon_spent"] <= 2.0 and d["epsilon_spent"] == pytest.approx(2.0, rel=1e-2)
    assert results.queries_curve["dp_icl_relation"]["dp-icl:2:3"] == "add-remove-one"


def test_t_interval_by_hand():
    mean, half = t_interval([0.2, 0.4, 0.6])
    # s = 0.2, sem = 0.2/√3, t_{0.975, 2} = 4.302652729911275
    assert mean == pytest.approx(0.4) and half == pytest.approx(4.302652729911275 * 0.2 / math.sqrt(3))
    assert t_interval([0.5]) == (0.5, None)


@pytest.mark.slow
def test_cli_eval_writes_every_output(tiny_llava_path, tmp_path):
    root = write_vizwiz(tmp_path / "vizwiz", n_train=8, n_val=3)
    out = tmp_path / "report"
    args = [
        "eval", "--model", str(tiny_llava_path), "--benchmark", "vizwiz", "--benchmark-root", str(root),
        "--methods", "zero-shot,icl:2,mtv,dp-mtv,dp-icl:2", "--epsilons", "1,4", "--seeds", "2",
        "--heads", "layers:0", "--shots-per-chunk", "2", "--max-new-tokens", "2", "--non-private",
        "--out", str(out), "--quiet",
    ]  # fmt: skip
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    assert "| DP-MTV | private |" in result.output

    data = json.loads((out / "results.json").read_text())
    assert data["config"]["methods"] == ["zero-shot", "icl:2", "mtv", "dp-mtv", "dp-icl:2"]
    assert data["config"]["model"] == str(tiny_llava_path) and data["benchmark"]["num_test"] == 3
    runs = data["runs"]
    assert len(runs) == 1 + 2 + 2 + 2 * 2 + 2 * 2
    for run in runs:
        assert {"method", "epsilon", "seed", "metrics", "privacy"} <= set(run)
        assert 0.0 <= run["metrics"]["vqa_accuracy"] <= 1.0
        if run["method"] in ("mtv", "icl:2"):
            assert run["privacy"] == "non-private" and run["epsilon_label"] == "∞ (NON-PRIVATE)"
            assert "NON-PRIVATE" in run["display"]
    assert {(r["method"], r["epsilon"]) for r in runs if r["privacy"] == "private"} == {
        (m, e) for m in ("dp-mtv", "dp-icl:2") for e in (1.0, 4.0)
    }
    assert {r["metric"] for r in data["summary"]} == {"vqa_accuracy"}
    curve = data["queries_curve"]
    assert (
        curve["total_epsilon"] == 1.0 and curve["num_queries"][0] == 1 and curve["num_queries"][-1] == 10_000
    )
    assert set(curve["dp-mtv"]) == {"0", "1"} and len(curve["dp-icl"]["dp-icl:2"]["1"]) == len(
        curve["num_queries"]
    )

    report = (out / "report.md").read_text()
    assert "| MTV [NON-PRIVATE, ε = ∞] | non-private |" in report and "± " in report
    assert assert_tables_valid(report) >= 2  # the metric table and the queries table
    predictions = [json.loads(line) for line in (out / "predictions.jsonl").read_text().splitlines()]
    assert len(predictions) == 3 * len(runs)
    assert {p["epsilon"] for p in predictions if p["method"] == "mtv"} == {"∞ (NON-PRIVATE)"}
    for name in ("privacy_utility.png", "queries.png"):
        with Image.open(out / name) as image:
            assert image.format == "PNG" and image.size[0] > 300
