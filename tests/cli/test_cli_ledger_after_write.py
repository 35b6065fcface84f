"""The ledger cannot record a written artifact (locked by another writer, or full) after the
charge: the build says exactly what happened in one ``warning:`` line (the artifact is complete
and valid, the charge stands, the ledger lists it as not written) and finishes.

On the old code (a41db9d) both were a traceback after the artifact was on disk, and the build
stopped there (no summary, no signature)."""

from __future__ import annotations

import sqlite3

import pytest
from click.testing import CliRunner

import dpmtv.ledger.book
import dpmtv.pipeline.build
from dpmtv.artifact.vector import load_task_vector
from dpmtv.cli import main
from tests.cli.test_cli_ledger import _build, _init, _show


def _lock_after_save(monkeypatch, ledger) -> list[sqlite3.Connection]:
    """Another process takes the ledger's write lock right after the artifact is saved."""
    holders: list[sqlite3.Connection] = []
    original = dpmtv.pipeline.build.save_task_vector

    def save_then_lock(vector, path, **options):
        saved = original(vector, path, **options)
        holder = sqlite3.connect(ledger, isolation_level=None)
        holder.execute("BEGIN IMMEDIATE")
        holders.append(holder)
        return saved

    monkeypatch.setattr(dpmtv.pipeline.build, "save_task_vector", save_then_lock)
    return holders


def _full_after_charge(monkeypatch, ledger) -> list[sqlite3.Connection]:
    """SQLite's own error for a full disk, raised by the ledger's write of the artifact record."""

    def full(self, *args, **kwargs):
        raise sqlite3.OperationalError("database or disk is full")

    monkeypatch.setattr(dpmtv.ledger.book.Ledger, "mark_written", full)
    return []


@pytest.mark.parametrize(
    "fault, words",
    [(_lock_after_save, "database is locked"), (_full_after_charge, "database or disk is full")],
)
def test_a_ledger_that_cannot_record_the_write_is_one_warning_and_the_build_finishes(
    tiny_llava_path, records_file, tmp_path, monkeypatch, fault, words
):
    runner = CliRunner()
    ledger = tmp_path / "ledger.sqlite"
    _init(runner, ledger, "clinic", 10)
    out = tmp_path / "v.safetensors"
    holders = fault(monkeypatch, ledger)
    args = _build(tiny_llava_path, records_file, out, "--heads", "layers:0", "--dataset", "clinic")
    try:
        result = runner.invoke(main, [*args, "--ledger", str(ledger), "--ledger-timeout", "0.2"])
    finally:
        for holder in holders:
            holder.execute("ROLLBACK")
            holder.close()
    assert result.exit_code == 0 and "Traceback" not in result.output, result.output
    warnings = [line for line in result.output.splitlines() if line.startswith("warning:") and words in line]
    assert len(warnings) == 1, result.output
    assert str(out) in warnings[0] and "was written" in warnings[0] and "not written" in warnings[0]
    load_task_vector(out)  # complete and valid
    (charge,) = _show(runner, ledger, "clinic")["charges"]  # the charge stands, listed as not written
    assert charge["written_at"] is None and charge["charge_id"] in warnings[0]
