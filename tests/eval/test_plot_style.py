"""One style for every figure: a method has the same colour and legend label in the evaluation's
privacy-utility and queries plots and in the demo's plot, and ε ticks read 0.5 … 8 everywhere.
Checked on the matplotlib artists, not on pixels."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402
from matplotlib.colors import to_rgba  # noqa: E402

from dpmtv.demo import privacy_utility_by_group_figure as demo_figure  # noqa: E402
from dpmtv.eval.plot_style import method_label  # noqa: E402
from dpmtv.eval.plots import privacy_utility_figure, queries_figure  # noqa: E402
from dpmtv.eval.report import summarise  # noqa: E402
from dpmtv.eval.runner import EvalResults, RunResult  # noqa: E402

EPSILONS = [0.5, 1.0, 2.0, 4.0, 8.0]


def _eval_results() -> EvalResults:
    runs = [RunResult("zero-shot", "zero-shot", "no private data", None, None, {"accuracy": 0.2}, {}, [])]
    for seed in (0, 1):
        runs.append(RunResult("mtv", "mtv", "non-private", None, seed, {"accuracy": 0.8}, {}, []))
        runs.append(RunResult("icl:16", "icl:16", "non-private", None, seed, {"accuracy": 0.7}, {}, []))
        for epsilon in EPSILONS:
            for method in ("dp-mtv", "dp-icl:4"):
                details = {"neighbouring_relation": "replace-one"}
                runs.append(
                    RunResult(method, method, "private", epsilon, seed, {"accuracy": 0.5}, details, [])
                )
    grid = [1, 10, 100]
    curve = {
        "total_epsilon": 1.0,
        "delta": 1e-5,
        "num_queries": grid,
        "dp-mtv": {"0": 0.5, "1": 0.52},
        "dp-icl": {"dp-icl:4": {"0": [0.5, 0.4, 0.3], "1": [0.5, 0.4, 0.3]}},
        "dp_icl_noise_std": {"dp-icl:4": [1.0, 2.0, 3.0]},
        "dp_icl_relation": {"dp-icl:4": "replace-one"},
        "dp_mtv_relation": "replace-one",
    }
    return EvalResults(
        config={"delta": 1e-5, "epsilons_evaluated": EPSILONS},
        benchmark={"name": "toy", "num_test": 10},
        primary_metric="accuracy",
        runs=runs,
        queries_curve=curve,
    )


def _demo_summary() -> dict:
    rows = [
        {"method": "zero-shot", "epsilon": None, "accuracy": 0.2, "ci95": None},
        {"method": "icl-16 (non-private)", "epsilon": None, "accuracy": 0.7, "ci95": None},
        {"method": "mtv (non-private)", "epsilon": None, "accuracy": 0.8, "ci95": None},
        *({"method": "dp-mtv", "epsilon": e, "accuracy": 0.5, "ci95": 0.05} for e in EPSILONS),
    ]
    return {"seen": rows}


def _legend_colours(ax) -> dict[str, tuple]:
    """Legend label → RGBA of the artist drawn under it."""
    handles, labels = ax.get_legend_handles_labels()
    out = {}
    for handle, label in zip(handles, labels, strict=True):
        line = handle.lines[0] if hasattr(handle, "lines") else handle  # errorbar containers
        out[label] = to_rgba(line.get_color())
    return out


@pytest.fixture
def figures():
    results = _eval_results()
    summary = summarise(results)
    made = {
        "eval privacy-utility": privacy_utility_figure(results, summary),
        "eval queries": queries_figure(results, summary),
        "demo privacy-utility": demo_figure(_demo_summary()),
    }
    yield {name: fig.axes[0] for name, fig in made.items()}
    for fig in made.values():
        plt.close(fig)


def test_a_method_has_one_colour_and_one_label_in_every_figure(figures):
    colours = {name: _legend_colours(ax) for name, ax in figures.items()}
    dp_mtv = method_label("dp-mtv")
    eval_label = f"{dp_mtv}, replace-one"
    assert colours["eval privacy-utility"][eval_label] == colours["eval queries"][eval_label]
    assert colours["demo privacy-utility"][dp_mtv] == colours["eval queries"][eval_label]
    dp_icl = f"{method_label('dp-icl:4')}, replace-one"
    assert colours["eval privacy-utility"][dp_icl] == colours["eval queries"][dp_icl]
    assert colours["eval privacy-utility"][dp_icl] != colours["eval queries"][eval_label]
    zero = method_label("zero-shot")
    assert len({colours[name][zero] for name in figures}) == 1
    for eval_name, demo_name in (("mtv", "mtv (non-private)"), ("icl:16", "icl-16 (non-private)")):
        assert method_label(eval_name) == method_label(demo_name)
        label = method_label(eval_name)
        assert colours["eval privacy-utility"][label] == colours["demo privacy-utility"][label]


def test_overlapping_lines_differ_in_marker_or_line_style(figures):
    ax = figures["eval privacy-utility"]
    handles, labels = ax.get_legend_handles_labels()
    looks = set()
    for handle in handles:
        line = handle.lines[0] if hasattr(handle, "lines") else handle
        looks.add((line.get_marker(), str(line.get_linestyle())))
    assert len(looks) == len(labels)


def test_epsilon_ticks_read_the_same_in_eval_and_demo(figures):
    def ticks(ax):
        return [label.get_text() for label in ax.get_xticklabels()]

    expected = ["0.5", "1", "2", "4", "8"]
    assert ticks(figures["eval privacy-utility"]) == expected
    assert ticks(figures["demo privacy-utility"]) == expected
