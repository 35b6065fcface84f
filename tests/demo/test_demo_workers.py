"""The demo's (task, seed) runs in worker processes give the rows of one process, byte for byte."""

from __future__ import annotations

import io
import os
import signal
import subprocess
import sys
import time
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


def _process_state(pid: int) -> str | None:
    """``/proc/PID/stat``'s state letter, or None once the process is gone."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return None


def _children(pid: int) -> list[int]:
    children = []
    for task in os.listdir(f"/proc/{pid}/task"):
        with open(f"/proc/{pid}/task/{task}/children") as listed:
            children += [int(child) for child in listed.read().split()]
    return children


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_workers_exit_when_the_demo_process_is_killed(tmp_path):
    # A demo stopped by SIGKILL (or SIGTERM, which Python does not turn into cleanup) runs no
    # shutdown: its spawned workers must notice the parent is gone and exit by themselves,
    # not sit idle holding a model each.
    script = tmp_path / "parent.py"
    script.write_text(
        "import operator, sys, time\n"
        "from dpmtv.demo.parallel import submit_runs\n"
        "if __name__ == '__main__':\n"
        "    pool, futures = submit_runs('os:getpid', (), operator.add, [0, 0, 0, 0], workers=2)\n"
        "    print(*[f.result() for f in futures], flush=True)\n"
        "    time.sleep(600)\n"
    )
    parent = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True)
    try:
        assert parent.stdout.readline().split()  # the workers are up and have run
        worker_pids = _children(parent.pid)  # both workers (and the resource tracker)
        assert len(worker_pids) >= 2 and all(_process_state(pid) not in (None, "Z") for pid in worker_pids)
    finally:
        parent.kill()
        parent.wait()
        parent.stdout.close()
    deadline = time.monotonic() + 60  # liveness, not speed: they exit within a second here
    while time.monotonic() < deadline:
        if all(_process_state(pid) in (None, "Z") for pid in worker_pids):
            break
        time.sleep(0.2)
    alive = [pid for pid in worker_pids if _process_state(pid) not in (None, "Z")]
    for pid in alive:
        os.kill(pid, signal.SIGKILL)
    assert not alive, f"worker processes {alive} outlived the killed demo process"
