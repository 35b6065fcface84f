"""No duration of a private stage on the terminal, and file times that are the build's start.

Under add-remove-one the time a private stage takes grows with the private N: the choice on the
release scores every record, and its bar showed 0:00:00 / 0:00:03 / 0:00:10 elapsed at N = 6 /
60 / 200. Here real builds of a tiny LLaVA in a real process, stderr to a file, once with rich
drawing its bars (``TTY_COMPATIBLE=1``: rich writes to the file as to a terminal) and once off a
terminal (plain lines, at a shrunken interval so that a periodic line would show up).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.cli.test_cli_ledger import _build
from tests.conftest import write_records

pytestmark = pytest.mark.filterwarnings("ignore:the noise swamps the signal")  # tiny data, by design

PRIVATE_STAGES = ("candidates on the release", "extracting chunks")
_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
_TIME = re.compile(r"\d+:\d\d:\d\d|-:--:--")
_RATE = re.compile(r"\d\s*(it|chunks?|records?|steps?)/s\b")


def _candidates_build(model: Path, data: Path, out: Path) -> list[str]:
    """Add-remove-one, the candidates chosen on the release (every record scored), public m."""
    args = _build(model, data, out, "--heads-from", "private", "--private-selection", "candidates")
    args.remove("--quiet")
    return [*args, "--neighbouring-relation", "add-remove-one", "--num-chunks", "3"]


def _stderr_of_build(model: Path, tmp_path: Path, num_records: int, env: dict[str, str]) -> list[str]:
    data, out = write_records(tmp_path / f"data-{num_records}", num_records), tmp_path / "v.safetensors"
    out.unlink(missing_ok=True)
    stderr = tmp_path / f"stderr-{num_records}.txt"
    command = [sys.executable, "-m", "dpmtv.cli", *_candidates_build(model, data, out)]
    with stderr.open("w") as err_file:
        process = subprocess.run(
            command, stdout=subprocess.DEVNULL, stderr=err_file, env={**os.environ, "COLUMNS": "100", **env}
        )
    assert process.returncode == 0, stderr.read_text()
    text = _ANSI.sub("", stderr.read_text())
    return [line for line in re.split(r"[\r\n]", text) if line.strip()]


def _private_stage_lines(lines: list[str]) -> list[str]:
    return [line for line in lines if any(stage in line for stage in PRIVATE_STAGES)]


@pytest.mark.parametrize(
    "env",
    [{"TTY_COMPATIBLE": "1"}, {"TTY_COMPATIBLE": "0", "DPMTV_PROGRESS_INTERVAL_S": "0.01"}],
    ids=["terminal", "log-file"],
)
def test_a_private_stage_shows_no_elapsed_time_and_no_rate_at_any_n(tiny_llava_path, tmp_path, env):
    seen = set()
    for num_records in (12, 48):
        stages = _private_stage_lines(_stderr_of_build(tiny_llava_path, tmp_path, num_records, env))
        assert {stage for stage in PRIVATE_STAGES if any(stage in line for line in stages)} == set(
            PRIVATE_STAGES
        ), stages
        timed = [line for line in stages if _TIME.search(line) or _RATE.search(line)]
        assert timed == [], timed
        seen.add(tuple(dict.fromkeys(line.strip() for line in stages)))  # a redrawn bar counts once
    assert len(seen) == 1, seen  # the same lines at both N


def test_off_a_terminal_a_private_stage_prints_its_start_and_end_only(tiny_llava_path, tmp_path):
    env = {"TTY_COMPATIBLE": "0", "DPMTV_PROGRESS_INTERVAL_S": "0.01"}
    lines = _private_stage_lines(_stderr_of_build(tiny_llava_path, tmp_path, 30, env))
    for stage in PRIVATE_STAGES:
        mine = [line for line in lines if line.startswith(stage)]
        assert len(mine) == 2 and mine[1] == f"{stage}: done", mine


def test_the_artifact_and_its_card_carry_the_build_start_as_their_file_time(tiny_llava_path, tmp_path):
    from datetime import datetime

    from dpmtv.artifact.card import card_path
    from dpmtv.artifact.vector import load_task_vector

    out = tmp_path / "v.safetensors"
    _stderr_of_build(tiny_llava_path, tmp_path, 12, {})
    created_s = datetime.fromisoformat(load_task_vector(out).metadata.created_at).timestamp()
    assert out.stat().st_mtime == created_s
    assert card_path(out).stat().st_mtime == created_s


def test_a_signed_builds_signature_carries_the_build_start_too(tiny_llava_path, tmp_path):
    """The signature is written at the end of the build: its file time would time the private
    computation unless it is set to the build's start as well."""
    from datetime import datetime

    from click.testing import CliRunner

    from dpmtv.artifact.signature import signature_path
    from dpmtv.artifact.vector import load_task_vector
    from dpmtv.cli import main
    from tests.artifact.test_signature import _key_pair

    key, _ = _key_pair(tmp_path, "signer")
    data, out = write_records(tmp_path / "data", 12), tmp_path / "signed.safetensors"
    args = [*_build(tiny_llava_path, data, out, "--heads", "layers:0"), "--sign-key", str(key)]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    created_s = datetime.fromisoformat(load_task_vector(out).metadata.created_at).timestamp()
    assert signature_path(out).stat().st_mtime == created_s
