"""Every file dpmtv writes is written whole or not at all (ground rule 3): a write that fails,
however late, leaves the previous file as it was and no temporary beside it; a new file gets the
mode the umask gives, as ``open()`` would."""

from __future__ import annotations

import json
import os

import matplotlib
import pytest

from dpmtv import _atomic
from dpmtv._atomic import replacing, save_figure_atomically, write_text_atomically
from dpmtv.cli._output_path import TEMPORARY_NAME

matplotlib.use("Agg")


class _Interrupted(Exception):
    pass


def _fail_at_the_rename(monkeypatch):
    """The latest point a write can fail: the complete temporary is about to replace the target."""

    def refuse(source, target):
        raise _Interrupted(f"killed before {target}")

    monkeypatch.setattr(_atomic.os, "replace", refuse)


def test_a_failed_write_leaves_the_old_file_whole_and_no_temporary(tmp_path, monkeypatch):
    target = tmp_path / "results.json"
    target.write_text("old\n")
    with pytest.raises(_Interrupted), replacing(target) as temporary:
        assert TEMPORARY_NAME.match(os.path.basename(temporary))  # the stale-temporary sweep knows it
        with open(temporary, "w") as handle:
            handle.write("half of the new")
        raise _Interrupted("the writer failed")
    _fail_at_the_rename(monkeypatch)
    with pytest.raises(_Interrupted):
        write_text_atomically(target, "new\n")
    assert target.read_text() == "old\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["results.json"]


def test_a_new_file_gets_the_umask_mode_and_the_umask_is_kept(tmp_path):
    previous = os.umask(0o027)
    try:
        path = write_text_atomically(tmp_path / "sub" / "report.md", "# report\n")
        assert os.umask(0o027) == 0o027  # reading the umask left it as it was
    finally:
        os.umask(previous)
    assert path.read_text() == "# report\n" and (path.stat().st_mode & 0o777) == 0o640


def test_a_figure_is_written_in_its_suffix_format(tmp_path):
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots()
    ax.plot([0, 1], [1, 0])
    try:
        save_figure_atomically(fig, tmp_path / "curve.png", dpi=50)
        save_figure_atomically(fig, tmp_path / "curve.svg")
    finally:
        plt.close(fig)
    assert (tmp_path / "curve.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert b"<svg" in (tmp_path / "curve.svg").read_bytes()[:400]


def _eval_results():
    from dpmtv.eval.runner import EvalResults, RunResult

    run = RunResult(
        method="zero-shot", display="zero-shot", privacy="no private data", epsilon=None, seed=0,
        metrics={"accuracy": 0.5}, details={}, predictions=["yes", "no"],
    )  # fmt: skip
    config = {
        "model": "tiny",
        "seeds": [0],
        "delta": 1e-5,
        "heads": "all",
        "dpmtv_version": "0",
        "epsilons_evaluated": [],
    }
    benchmark = {"name": "toy", "num_train": 4, "num_test": 2, "metrics": ["accuracy"]}
    return EvalResults(
        config=config, benchmark=benchmark, primary_metric="accuracy", runs=[run], queries_curve=None
    )


def test_an_eval_report_interrupted_at_its_results_keeps_the_last_run_s(tmp_path, monkeypatch):
    """A second ``dpmtv eval --out`` into a folder that failed while writing: the first run's
    results.json is still whole, not truncated or half of the new one."""
    from dpmtv.eval.report import write_report

    paths = write_report(_eval_results(), tmp_path)
    before = paths["results"].read_text()
    json.loads(before)
    _fail_at_the_rename(monkeypatch)
    with pytest.raises(_Interrupted):
        write_report(_eval_results(), tmp_path)
    assert paths["results"].read_text() == before
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]


def test_the_demo_s_results_are_written_atomically(tmp_path, monkeypatch):
    from dpmtv.demo.report import write_outputs

    (tmp_path / "results.json").write_text("[]\n")
    _fail_at_the_rename(monkeypatch)
    with pytest.raises(_Interrupted):
        write_outputs(tmp_path, [{"task": "t"}], {}, {}, None, {}, "a", 1.0, {})
    assert (tmp_path / "results.json").read_text() == "[]\n"
