"""The command line's conventions, run as a user runs it: ``python -m dpmtv`` in a subprocess.

Exit codes: 0 success, 2 usage errors (click's own, and a refused option value), 1 refusals and
failures of a well-formed command; ``DPMTV_*`` environment variables fill options the command
line leaves out (docs/cli.md)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

import dpmtv


def _dpmtv(*args: str, **env: str) -> subprocess.CompletedProcess:
    environment = {k: v for k, v in os.environ.items() if not k.startswith("DPMTV_")}
    return subprocess.run(
        [sys.executable, "-m", "dpmtv", *args],
        env={**environment, **env},
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_python_m_dpmtv_runs_the_cli():
    result = _dpmtv("--version")
    assert result.returncode == 0 and dpmtv.__version__ in result.stdout
    usage = _dpmtv("inspect")
    assert usage.returncode == 2 and usage.stderr.startswith("Usage: dpmtv inspect")


@pytest.mark.parametrize(
    "args, message",
    [
        (["inspect", "--no-such-flag", "x"], "No such option '--no-such-flag'"),
        (["answer", "--dtype", "float64"], "'float64' is not one of"),
        (["answer", "--question", "q"], "give --image and --question, or --queries FILE"),
    ],
    ids=["click-unknown-option", "click-bad-choice", "refused-option-combination"],
)
def test_usage_errors_exit_2(args, message):
    result = _dpmtv(*args)
    assert result.returncode == 2, result.stderr
    assert message in result.stderr and "Traceback" not in result.stderr
    # one prefix for every error, click's own included
    assert f"error: {message}" in result.stderr or "\nerror: " in result.stderr
    assert "Error:" not in result.stderr


def test_device_defaults_to_auto_and_names_the_device_it_chose():
    import torch

    chosen = "cuda" if torch.cuda.is_available() else "cpu"
    result = _dpmtv("answer", "--question", "q")  # no DPMTV_DEVICE: the default
    assert result.returncode == 2, result.stderr
    assert result.stderr.splitlines()[0].startswith(f"device: {chosen} (--device auto: ")
    assert "[default: auto]" in " ".join(_dpmtv("answer", "--help").stdout.split())
    explicit = _dpmtv("answer", "--question", "q", "--device", "cpu")
    assert "device:" not in explicit.stderr  # a device the user named is not announced


def test_a_refusal_exits_1_with_one_error_line(tmp_path):
    garbage = tmp_path / "task.safetensors"
    garbage.write_bytes(b"not an artifact")
    result = _dpmtv("inspect", str(garbage))
    assert result.returncode == 1, result.stderr
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert lines[0].startswith("error: ") and "not a readable dpmtv task vector" in result.stderr
    assert "Traceback" not in result.stderr


def test_environment_variables_fill_options_and_flags_win():
    # DPMTV_<COMMAND>_<OPTION> (auto_envvar_prefix) and the shared DPMTV_DTYPE
    from_env = _dpmtv("answer", "--question", "q", DPMTV_ANSWER_MAX_NEW_TOKENS="0")
    assert from_env.returncode == 2 and "--max-new-tokens" in from_env.stderr
    shared = _dpmtv("answer", "--question", "q", DPMTV_DTYPE="float64")
    assert shared.returncode == 2 and "'float64' is not one of" in shared.stderr
    flag_wins = _dpmtv("answer", "--question", "q", "--max-new-tokens", "2", DPMTV_ANSWER_MAX_NEW_TOKENS="0")
    assert flag_wins.returncode == 2 and "give --image and --question" in flag_wins.stderr
