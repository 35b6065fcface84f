"""The demo as a first-time user runs it with its stderr going to a log (nohup, CI, a scheduler):
the log shows progress during the run, stdout names every output, and the report reads plainly
(no negative share of a gain, no bare dash, tables that parse). A real process, the packaged
embedded model, the smallest demo the CLI allows."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

from tests._markdown import BARE_DASH, assert_tables_valid

_SMALLEST = ["--quick", "--no-shot-curve", "--records-per-task", "64", "--workers", "1"]


@pytest.mark.slow
def test_the_demo_logs_progress_names_its_outputs_and_reads_plainly(tmp_path):
    out, log = tmp_path / "demo", tmp_path / "stderr.log"
    env = {**os.environ, "DPMTV_PROGRESS_INTERVAL_S": "0.5", "COLUMNS": "120"}
    with log.open("w") as stderr:
        process = subprocess.run(
            [sys.executable, "-m", "dpmtv", "demo", *_SMALLEST, "--out", str(out)],
            stdout=subprocess.PIPE,
            stderr=stderr,
            env=env,
            text=True,
        )
    assert process.returncode == 0, log.read_text()
    progress = [line for line in log.read_text().splitlines() if line.startswith("demo: tasks × seeds")]
    assert progress[0] == "demo: tasks × seeds: 0/4", progress
    assert re.fullmatch(r"demo: tasks × seeds: 4/4, done in \d+:\d\d:\d\d", progress[-1]), progress
    assert any(re.fullmatch(r"demo: tasks × seeds: \d/4, \d+:\d\d:\d\d elapsed", line) for line in progress)

    stdout = " ".join(process.stdout.split())
    for name in ("report.md", "privacy_utility.png", "results.json", "summary.json", "_eps1.safetensors"):
        assert f"{out}/" in stdout and name in stdout, name
    assert "docs/embedded-model.md" in stdout[stdout.index("Shown:") :]  # the closing sentences

    report = (out / "report.md").read_text()
    assert report.split("\n")[2].startswith("Shown:")  # the report leads with the same sentences
    assert not re.search(r"-\d+\s?%", report), "a negative share of a gain"
    assert not BARE_DASH.search(report), "a bare dash"
    assert assert_tables_valid(report) >= 2
