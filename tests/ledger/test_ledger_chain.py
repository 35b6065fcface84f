"""The ledger notices edits of its own rows (a hash chain per dataset, checked on every open) and
says so in one line; a damaged file or invalid stored JSON is one line naming the ledger.

On the old code (format 2) each tampering below went unnoticed: a charge event with one digit
changed, a budget 3 → 30, ``DELETE FROM charges``; the damaged page and the invalid JSON were
tracebacks."""

from __future__ import annotations

import json
import sqlite3

import pytest
from click.testing import CliRunner

from dpmtv.cli import main
from dpmtv.errors import LedgerError
from dpmtv.ledger.book import Ledger
from dpmtv.privacy import gaussian_release_event

DELTA = 1e-5
UNIT = {"neighbouring_relation": "replace-one", "privacy_unit": "record"}


def _charge(ledger: Ledger, name: str = "ds", z: float = 3.0):
    return ledger.charge(
        name, gaussian_release_event(noise_multiplier=z), **UNIT, parameters={"epsilon": 1.0}, artifact=None
    )


@pytest.fixture
def ledger(tmp_path) -> Ledger:
    book = Ledger(tmp_path / "budget.sqlite")
    book.init_dataset("ds", epsilon=3.0, delta=DELTA)
    book.init_dataset("other", epsilon=3.0, delta=DELTA)
    receipt = _charge(book)
    book.mark_written(receipt, artifact="v.safetensors", tensors_sha256="ab" * 32)
    book.void_dataset("other", reason="seeded noise", parameters={}, artifact=None)
    return book


def _sql(ledger: Ledger, statement: str, *args) -> None:
    conn = sqlite3.connect(ledger.path)
    conn.execute(statement, args)
    conn.commit()
    conn.close()


def _budget(*args):
    return CliRunner().invoke(main, ["budget", *args])


def _one_error_line(result, exit_code: int = 1) -> str:
    """The one error line; exit 1 for a refusal at run time, 2 for a refused option (docs/cli.md)."""
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert result.exit_code == exit_code and len(lines) == 1 and lines[0].startswith("error:"), result.output
    return lines[0]


def test_an_untouched_ledger_verifies_and_charges(ledger):
    assert ledger.status("ds").chain_problem is None and ledger.status("other").chain_problem is None
    _charge(ledger)
    verify = _budget("verify", "--ledger", str(ledger.path))
    assert verify.exit_code == 0, verify.output
    assert "ds: chain intact" in verify.output and "other: chain intact" in verify.output


def _digit_changed(event_json: str) -> str:
    """The stored event with the first digit of its noise multiplier changed (3.0 → 4.0)."""
    assert '"noise_multiplier": 3.0' in event_json
    return event_json.replace('"noise_multiplier": 3.0', '"noise_multiplier": 4.0', 1)


TAMPERINGS = {
    "one digit of a charge event": lambda book: _sql(
        book,
        "UPDATE charges SET event_json = ?",
        _digit_changed(sqlite3.connect(book.path).execute("SELECT event_json FROM charges").fetchone()[0]),
    ),
    "the budget 3 -> 30": lambda book: _sql(book, "UPDATE datasets SET epsilon = 30 WHERE name = 'ds'"),
    "DELETE FROM charges": lambda book: _sql(book, "DELETE FROM charges"),
    "a charge's write time": lambda book: _sql(book, "UPDATE charges SET written_at = 'yesterday'"),
    "a charge moved to another dataset": lambda book: _sql(book, "UPDATE charges SET dataset = 'other'"),
}


@pytest.mark.parametrize("tampering", list(TAMPERINGS))
def test_an_edited_row_breaks_its_datasets_chain_and_charging_it_is_refused(ledger, tampering):
    TAMPERINGS[tampering](ledger)
    problem = ledger.status("ds").chain_problem
    assert problem is not None and "outside dpmtv" in problem
    with pytest.raises(LedgerError, match="chain of dataset 'ds' is broken.*nothing was charged") as refused:
        _charge(ledger)
    assert str(ledger.path) in str(refused.value) and "\n" not in str(refused.value)
    with pytest.raises(LedgerError, match="is broken"):
        ledger.check_dataset("ds", **UNIT)
    verify = _budget("verify", "--ledger", str(ledger.path))
    assert verify.exit_code == 1 and "ds: chain BROKEN" in verify.output
    shown = _budget("show", "ds", "--ledger", str(ledger.path))
    assert shown.exit_code == 0 and "BROKEN" in shown.output
    assert "BROKEN" in _budget("show", "--ledger", str(ledger.path)).output


def test_a_break_in_one_dataset_leaves_the_others_chargeable(ledger):
    ledger.init_dataset("third", epsilon=3.0, delta=DELTA)
    _sql(ledger, "UPDATE datasets SET epsilon = 30 WHERE name = 'ds'")
    _charge(ledger, "third")
    assert ledger.status("third").chain_problem is None


def test_deleted_chain_entries_are_noticed_unless_the_whole_tail_and_its_counter_go(ledger):
    """Entries removed from the middle of the chain leave a gap; the docs say what a chain
    cannot see (a whole tail removed with SQLite's counter reset, or the file replaced)."""
    _sql(ledger, "DELETE FROM chain WHERE seq = 2")
    with pytest.raises(LedgerError, match="is broken"):
        _charge(ledger)
    assert "deleted" in ledger.status("ds").chain_problem


def test_a_zeroed_page_is_one_line_naming_the_ledger(ledger):
    page_size = sqlite3.connect(ledger.path).execute("PRAGMA page_size").fetchone()[0]
    with open(ledger.path, "r+b") as file:  # page 2 onwards: the tables' b-trees
        file.seek(page_size)
        file.write(b"\0" * page_size * 2)
    for args in (["show"], ["show", "ds"], ["verify"]):
        line = _one_error_line(_budget(*args, "--ledger", str(ledger.path)))
        assert str(ledger.path) in line and "damaged" in line


def test_invalid_event_json_is_one_line_naming_the_ledger_and_the_charge(ledger):
    _sql(ledger, "UPDATE charges SET event_json = '{\"class_name\": '")
    line = _one_error_line(_budget("show", "ds", "--ledger", str(ledger.path)))
    assert str(ledger.path) in line and "event" in line and "JSON" in line
    with pytest.raises(LedgerError, match="is broken"):
        _charge(ledger)


_FORMAT_2 = """
CREATE TABLE datasets (name TEXT PRIMARY KEY, epsilon REAL NOT NULL, delta REAL NOT NULL,
    created_at TEXT NOT NULL, neighbouring_relation TEXT NOT NULL, privacy_unit TEXT NOT NULL);
CREATE TABLE charges (seq INTEGER PRIMARY KEY AUTOINCREMENT, charge_id TEXT NOT NULL UNIQUE,
    dataset TEXT NOT NULL REFERENCES datasets(name), event_json TEXT NOT NULL,
    parameters_json TEXT NOT NULL, artifact TEXT, charged_at TEXT NOT NULL,
    epsilon_after REAL NOT NULL, written_at TEXT, tensors_sha256 TEXT);
CREATE TABLE voids (seq INTEGER PRIMARY KEY AUTOINCREMENT, void_id TEXT NOT NULL UNIQUE,
    dataset TEXT NOT NULL REFERENCES datasets(name), reason TEXT NOT NULL,
    parameters_json TEXT NOT NULL, artifact TEXT, voided_at TEXT NOT NULL, written_at TEXT,
    tensors_sha256 TEXT);
PRAGMA user_version = 2;
"""


def test_a_format_2_ledger_is_upgraded_and_show_says_since_when_it_is_chained(tmp_path):
    from dpmtv.privacy import event_to_json

    path = tmp_path / "old.sqlite"
    conn = sqlite3.connect(path)
    conn.executescript(_FORMAT_2)
    conn.execute("INSERT INTO datasets VALUES ('ds', 3.0, 1e-5, 'then', 'replace-one', 'record')")
    event = json.dumps(event_to_json(gaussian_release_event(noise_multiplier=3.0)))
    conn.execute(
        "INSERT INTO charges (charge_id, dataset, event_json, parameters_json, charged_at, epsilon_after) "
        "VALUES ('c1', 'ds', ?, '{}', 'then', 1.27)",
        (event,),
    )
    conn.commit()
    conn.close()
    ledger = Ledger(path)
    status = ledger.status("ds")
    assert status.chain_problem is None and status.chained_since is not None
    assert "format 2" in status.chained_since
    assert sqlite3.connect(path).execute("PRAGMA user_version").fetchone()[0] == 3
    shown = _budget("show", "ds", "--ledger", str(path))
    assert shown.exit_code == 0 and "upgraded from format 2" in shown.output
    _charge(ledger)
    _sql(ledger, "UPDATE charges SET epsilon_after = 0.1 WHERE charge_id = 'c1'")  # a row from before
    assert ledger.status("ds").chain_problem is not None


def test_build_refuses_a_broken_chain_and_a_damaged_ledger_in_one_line(ledger, tmp_path, tiny_llava_path):
    from tests.conftest import write_records

    data = write_records(tmp_path / "data", 12, seed=2)
    args = ["build", "--model", str(tiny_llava_path), "--data", str(data), "--heads", "layers:0",
            "--epsilon", "1", "--shots-per-chunk", "2", "--dataset", "ds", "--ledger", str(ledger.path),
            "--quiet", "--out", str(tmp_path / "v.safetensors")]  # fmt: skip
    _sql(ledger, "UPDATE datasets SET epsilon = 30 WHERE name = 'ds'")
    line = _one_error_line(CliRunner().invoke(main, args))
    assert "chain of dataset 'ds' is broken" in line and "nothing was charged" in line
    _sql(ledger, "UPDATE charges SET event_json = 'not json'")
    line = _one_error_line(CliRunner().invoke(main, args))
    assert str(ledger.path) in line and "nothing was charged" in line
    assert not (tmp_path / "v.safetensors").exists()
