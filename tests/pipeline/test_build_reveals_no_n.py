"""Nothing that reveals N, in files or on the terminal (issue 23 item 3; docs/design.md §1, §7).

Under add-remove-one the number of records N is private. A build used to store times taken
before and after its private computation (so their difference timed it, and it grows with N),
print progress bars counting the non-empty chunks ("20/20" vs "21/21"), and warn about δ >= 1/N
at N = 21 but not at N = 20, even with --quiet. Here: real CLI builds of a tiny LLaVA, a real
SQLite ledger, a real subprocess with stderr to a file.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from datetime import datetime
from pathlib import Path

import pytest
from click.testing import CliRunner

from dpmtv.artifact.vector import load_task_vector
from dpmtv.cli import main
from tests.cli.test_cli_ledger import _build, _init, _show
from tests.conftest import write_records

pytestmark = pytest.mark.filterwarnings("ignore:the noise swamps the signal")  # tiny data, by design


def test_every_stored_time_of_a_build_is_one_time_taken_before_its_private_computation(
    tiny_llava_path, tmp_path
):
    """Private selection charges before the votes and the extraction, so the old charge, write
    and creation times bracketed the private computation; 40 chunks make it last seconds."""
    data = write_records(tmp_path / "data", 80)
    runner, ledger, out = CliRunner(), tmp_path / "ledger.sqlite", tmp_path / "v.safetensors"
    _init(runner, ledger, "D", 20)
    args = _build(tiny_llava_path, data, out, "--heads-from", "private", "--select-k", "2")
    args = [*args, "--shots-per-chunk", "2", "--dataset", "D", "--ledger", str(ledger)]
    started = time.monotonic()
    result = runner.invoke(main, args)
    build_s = time.monotonic() - started
    assert result.exit_code == 0, result.output
    (charge,) = _show(runner, ledger, "D")["charges"]
    stored = {
        "ledger charged_at": datetime.fromisoformat(charge["charged_at"]).timestamp(),
        "ledger written_at": datetime.fromisoformat(charge["written_at"]).timestamp(),
        "artifact created_at": datetime.fromisoformat(load_task_vector(out).metadata.created_at).timestamp(),
        "artifact file time": out.stat().st_mtime,
    }
    spread_s = max(stored.values()) - min(stored.values())
    assert spread_s <= 0.5, f"{stored} (spread {spread_s:.2f} s over a {build_s:.1f} s build)"


def _mask(text: str) -> str:
    """Timings and the creation time (the clock, not the data) masked, and the privately selected
    head set (the noisy release itself, which may differ between any two builds)."""
    text = re.sub(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\+00:00", "<time>", text)
    text = re.sub(r"│ heads( +)│[^│]*│", "│ heads <released>│", text)
    return re.sub(r"-?\d*:[\d-]{2}:[\d-]{2}", "<elapsed>", text)


def _add_remove_build(model: Path, data: Path, out: Path, *extra: str) -> list[str]:
    """δ = 0.049: >= 1/21 but < 1/20. --num-chunks 5 is the public m."""
    args = _build(model, data, out, "--heads-from", "private", "--select-k", "2", *extra)
    args[args.index("--delta") + 1] = "0.049"
    args.remove("--quiet")
    return [*args, "--neighbouring-relation", "add-remove-one", "--num-chunks", "5"]


@pytest.mark.parametrize("quiet", [False, True])
def test_the_terminal_output_does_not_depend_on_n_through_the_runner(tiny_llava_path, tmp_path, quiet):
    outputs = []
    for num_records in (20, 21):
        data, out = write_records(tmp_path / "data", num_records), tmp_path / "v.safetensors"
        out.unlink(missing_ok=True)
        args = _add_remove_build(tiny_llava_path, data, out, *(["--quiet"] if quiet else []))
        result = CliRunner().invoke(main, args)
        assert result.exit_code == 0, result.output
        outputs.append((_mask(result.stdout), _mask(result.stderr)))
    assert outputs[0] == outputs[1]
    assert "delta" not in outputs[0][1]  # the δ >= 1/N warning is for --show-private-counts only
    assert quiet or "extracting chunks" in outputs[0][1]


def test_the_terminal_output_does_not_depend_on_n_in_a_real_process(tiny_llava_path, tmp_path):
    outputs = []
    for num_records in (20, 21):
        data, out = write_records(tmp_path / "data", num_records), tmp_path / "v.safetensors"
        out.unlink(missing_ok=True)
        stdout, stderr = tmp_path / f"stdout-{num_records}.txt", tmp_path / f"stderr-{num_records}.txt"
        command = [sys.executable, "-m", "dpmtv.cli", *_add_remove_build(tiny_llava_path, data, out)]
        with stdout.open("w") as out_file, stderr.open("w") as err_file:
            process = subprocess.run(
                command, stdout=out_file, stderr=err_file, env={**os.environ, "COLUMNS": "100"}
            )
        assert process.returncode == 0, stderr.read_text()
        outputs.append((_mask(stdout.read_text()), _mask(stderr.read_text())))
    assert outputs[0] == outputs[1]
    assert "private head votes" in outputs[0][1] and "extracting chunks" in outputs[0][1]


@pytest.mark.filterwarnings("default:delta = :UserWarning")  # the CLI prints it as a warning line
def test_with_show_private_counts_the_operator_sees_them(tiny_llava_path, tmp_path):
    data, out = write_records(tmp_path / "data", 21), tmp_path / "v.safetensors"
    result = CliRunner().invoke(main, _add_remove_build(tiny_llava_path, data, out, "--show-private-counts"))
    assert result.exit_code == 0, result.output
    assert "for 21 records" in " ".join(result.stderr.split())
    assert re.search(r"extracting chunks.* \d/\d", result.stderr)


def test_a_bar_inside_private_totals_prints_no_count(capsys):
    from dpmtv._progress import private_totals, progress_bar

    with private_totals(), progress_bar("private batches", 21) as advance:
        for _ in range(21):
            advance(1)
    printed = capsys.readouterr().err
    assert "private batches" in printed and "21" not in printed
    with progress_bar("public batches", 21) as advance:
        advance(21)
    assert "21/21" in capsys.readouterr().err


def test_an_error_after_the_charge_quotes_no_record(tiny_llava_path, tmp_path, monkeypatch):
    """A failure past the charge (here: the release's summation) keeps its charge and says so;
    its message, which could quote a record, is withheld."""
    from dpmtv.errors import RecordError

    data = write_records(tmp_path / "data", 12)
    runner, ledger, out = CliRunner(), tmp_path / "ledger.sqlite", tmp_path / "v.safetensors"
    _init(runner, ledger, "D", 20)

    def failing(*args, **kwargs):
        raise RecordError(f"{data}:7: field 'answer' = 'secret diagnosis'")

    monkeypatch.setattr("dpmtv.pipeline.release.sum_clipped_chunks", failing)
    args = _build(tiny_llava_path, data, out, "--heads-from", "private", "--select-k", "2")
    result = runner.invoke(main, [*args, "--dataset", "D", "--ledger", str(ledger)])
    assert result.exit_code == 1 and not out.exists()
    message = " ".join(result.output.split())
    assert "secret" not in message and "records.jsonl" not in message and "RecordError" in message
    assert "was charged" in message and len(_show(runner, ledger, "D")["charges"]) == 1
    json.dumps(message)  # one printable message
