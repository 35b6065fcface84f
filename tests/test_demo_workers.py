"""The demo's (task, seed) runs in worker processes give the rows of one process, byte for byte."""

from __future__ import annotations

import io
from dataclasses import replace

import pytest
from rich.console import Console

from dpmtv.demo import default_config, run_demo
from dpmtv.demo.parallel import resolve_demo_workers
from dpmtv.errors import ParameterError


def test_worker_count_defaults_to_the_cores_and_never_exceeds_the_runs(monkeypatch):
    import dpmtv.demo.parallel as parallel

    monkeypatch.setattr(parallel, "available_cpus", lambda: 2)
    assert resolve_demo_workers(None, 105) == 2
    assert resolve_demo_workers(None, 1) == 1
    assert resolve_demo_workers(0, 10) == resolve_demo_workers(1, 10) == 1
    assert resolve_demo_workers(4, 3) == 3
    monkeypatch.setattr(parallel, "available_cpus", lambda: 64)
    assert resolve_demo_workers(None, 105) == parallel.MAX_DEFAULT_WORKERS
    with pytest.raises(ParameterError, match="--workers"):
        resolve_demo_workers(-1, 3)


@pytest.mark.slow
def test_two_worker_processes_give_the_rows_of_one(tmp_path):
    config = replace(
        default_config(quick=True),
        tasks=("is_big", "is_green"),
        seeds=(0, 1),
        records_per_task=64,
        test_queries=8,
        shot_curve=(1, 4),
        shot_curve_queries=4,
    )
    quiet = Console(file=io.StringIO())
    outputs = {}
    for workers in (1, 2):
        out = tmp_path / f"w{workers}"
        run_demo(out, quick=True, console=quiet, config=config, workers=workers)
        outputs[workers] = {name: (out / name).read_bytes() for name in ("results.json", "report.md")}
    assert outputs[1]["results.json"] == outputs[2]["results.json"]
    assert len(outputs[1]["results.json"]) > 100
