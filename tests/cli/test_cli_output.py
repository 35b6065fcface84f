"""What the command line prints where: results on stdout; progress, warnings and errors on
stderr as one-line `warning:`/`error:` messages with user text shown verbatim."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from dpmtv.cli import main


def _build(tiny_llava_path, records_file, tmp_path, *extra):
    args = ["build", "--model", str(tiny_llava_path), "--data", str(records_file), "--heads", "layers:0"]
    args += ["--epsilon", "1", "--l2-clip-norm", "1.5", "--shots-per-chunk", "4"]
    args += ["--out", str(tmp_path / "t.safetensors"), *extra]
    return CliRunner().invoke(main, args)


def test_progress_goes_to_stderr_and_stdout_holds_the_summary(tiny_llava_path, records_file, tmp_path):
    result = _build(tiny_llava_path, records_file, tmp_path, "--delta", "1e-5")
    assert result.exit_code == 0, result.output
    assert "extracting chunks" not in result.stdout
    assert "extracting chunks" in result.stderr


@pytest.mark.filterwarnings("default:delta = :UserWarning")  # the CLI prints it as a warning line
def test_a_delta_warning_is_one_warning_line_without_python_source(tiny_llava_path, records_file, tmp_path):
    result = _build(tiny_llava_path, records_file, tmp_path, "--delta", "0.2", "--quiet")
    assert result.exit_code == 0, result.output
    lines = [line for line in result.stderr.splitlines() if "delta" in line.lower() or "δ" in line]
    assert lines and all(line.startswith("warning:") for line in lines), result.stderr
    assert "UserWarning" not in result.output and "warnings.warn" not in result.output
    assert len(lines) == len(set(lines))


def test_brackets_in_error_messages_survive(tiny_llava_path, records_file, tmp_path):
    (tmp_path / "h.json").write_text('[[0, "x"]]')
    result = _build(
        tiny_llava_path, records_file, tmp_path, "--delta", "1e-5", "--heads", str(tmp_path / "h.json")
    )
    assert result.exit_code == 2
    assert '[0, "x"]' in result.stderr and "[layer, head]" in result.stderr


@pytest.mark.parametrize("verbose", [False, True])
def test_library_progress_bars_only_with_verbose(verbose):
    from transformers.utils import logging

    result = CliRunner().invoke(
        main, ["--verbose", "inspect", "--help"] if verbose else ["inspect", "--help"]
    )
    assert result.exit_code == 0
    assert logging.is_progress_bar_enabled() is verbose
