"""Evaluation harness: every method side by side on one benchmark and model (docs/eval.md).

::

    benchmark = load_benchmark("vizwiz", root="data/vizwiz")        # or load_record_files(...)
    settings = EvalSettings(methods=parse_methods("zero-shot,dp-mtv,dp-icl"), epsilons=(1, 4))
    results = run_evaluation(load_model(path), benchmark, settings, heads="layers:8-12")
    write_report(results, "reports/run1")   # results.json, report.md, two PNGs

Modules: :mod:`~dpmtv.eval.scorers` (metrics and the VQA normalisation),
:mod:`~dpmtv.eval.benchmarks` (loaders by name), :mod:`~dpmtv.eval.methods` (the methods),
:mod:`~dpmtv.eval.dp_icl` (the DP-ICL baseline's model side; its privacy maths is
:mod:`dpmtv.privacy.noisy_vote`), :mod:`~dpmtv.eval.runner`, :mod:`~dpmtv.eval.report`,
:mod:`~dpmtv.eval.plots`.
"""

from dpmtv.eval.benchmarks import Benchmark, LoadOptions, benchmark_names, load_benchmark, load_record_files
from dpmtv.eval.methods import EvalSettings, MethodSpec, parse_methods
from dpmtv.eval.report import write_report
from dpmtv.eval.runner import EvalResults, RunResult, run_evaluation

__all__ = [
    "Benchmark",
    "EvalResults",
    "EvalSettings",
    "LoadOptions",
    "MethodSpec",
    "RunResult",
    "benchmark_names",
    "load_benchmark",
    "load_record_files",
    "parse_methods",
    "run_evaluation",
    "write_report",
]
