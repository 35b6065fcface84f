"""A chained ledger cannot be laundered back into an intact one by the tricks a chain without a
secret could still refuse: a format number set back so that the next open "upgrades" (and so
re-chains) edited rows, a dropped ``chain`` table, or a deleted dataset row created again.

On the old code (a41db9d) each of them passed: ``PRAGMA user_version = 2`` after raising a budget
1.5 → 30 (or changing one digit of an event) re-chained the edit and verified as intact; a dropped
``chain`` table was a traceback; a deleted dataset row, created again with ``budget init``, took
any budget while its charges stayed, chain intact."""

from __future__ import annotations

import sqlite3

import pytest

from dpmtv.errors import LedgerError
from dpmtv.ledger.book import Ledger
from tests.ledger.test_ledger_chain import DELTA, TAMPERINGS, _budget, _charge, _one_error_line, _sql


@pytest.fixture
def ledger(tmp_path) -> Ledger:
    book = Ledger(tmp_path / "budget.sqlite")
    book.init_dataset("ds", epsilon=3.0, delta=DELTA)
    book.init_dataset("other", epsilon=3.0, delta=DELTA)
    book.mark_written(_charge(book), artifact="v.safetensors", tensors_sha256="ab" * 32)
    book.void_dataset("other", reason="seeded noise", parameters={}, artifact=None)
    return book


def _refused_everywhere(ledger: Ledger, words: str) -> None:
    """Charging, status and the CLI's show and verify all refuse the file in one line."""
    with pytest.raises(LedgerError, match=words) as refused:
        _charge(ledger)
    assert str(ledger.path) in str(refused.value) and "\n" not in str(refused.value)
    with pytest.raises(LedgerError, match=words):
        ledger.status("ds")
    for args in (["show"], ["show", "ds"], ["verify"]):
        line = _one_error_line(_budget(*args, "--ledger", str(ledger.path)))
        assert "tampered" in line and str(ledger.path) in line


@pytest.mark.parametrize("tampering", list(TAMPERINGS))
def test_a_format_number_set_back_does_not_re_chain_edited_rows(ledger, tampering):
    TAMPERINGS[tampering](ledger)
    _sql(ledger, "PRAGMA user_version = 2")
    _refused_everywhere(ledger, "tampered.*holds a hash chain")
    assert sqlite3.connect(ledger.path).execute("PRAGMA user_version").fetchone()[0] == 2  # not upgraded


def test_a_format_number_set_back_on_an_untouched_ledger_is_still_refused(ledger):
    """An upgrade chains only a file that never had a chain, whatever its rows hold."""
    _sql(ledger, "PRAGMA user_version = 1")
    _refused_everywhere(ledger, "tampered.*holds a hash chain")


@pytest.mark.parametrize("drop", ["DROP TABLE chain", "DELETE FROM chain"])
def test_a_chained_ledger_without_its_chain_is_tampered_not_a_traceback(ledger, drop):
    _sql(ledger, drop)
    if drop.startswith("DROP"):
        _refused_everywhere(ledger, "tampered.*chain table is missing")
    else:
        with pytest.raises(LedgerError, match="is broken"):
            _charge(ledger)
        verify = _budget("verify", "--ledger", str(ledger.path))
        assert verify.exit_code == 1 and "ds: chain BROKEN" in verify.output


def test_a_deleted_dataset_row_cannot_be_initialised_again(ledger):
    conn = sqlite3.connect(ledger.path)
    conn.execute("DELETE FROM datasets WHERE name = 'ds'")
    conn.commit()
    conn.close()
    with pytest.raises(LedgerError, match="chain of dataset 'ds' is broken.*deleted outside dpmtv"):
        _charge(ledger)
    with pytest.raises(LedgerError, match="'ds' has a history.*cannot be created again"):
        ledger.init_dataset("ds", epsilon=30.0, delta=DELTA)
    line = _one_error_line(
        _budget("init", "ds", "--epsilon", "30", "--delta", "1e-5", "--ledger", str(ledger.path))
    )
    assert "cannot be created again" in line and "another name" in line
    verify = _budget("verify", "--ledger", str(ledger.path))
    assert verify.exit_code == 1 and "ds: chain BROKEN" in verify.output
    assert ledger.status("other").chain_problem is None  # the other dataset stays usable


def test_a_voided_dataset_deleted_with_its_void_cannot_be_initialised_again(ledger):
    """A name the chain knows (here only through its dataset row and a void) is never new."""
    conn = sqlite3.connect(ledger.path)
    conn.execute("DELETE FROM voids WHERE dataset = 'other'")
    conn.execute("DELETE FROM datasets WHERE name = 'other'")
    conn.commit()
    conn.close()
    with pytest.raises(LedgerError, match="cannot be created again"):
        ledger.init_dataset("other", epsilon=30.0, delta=DELTA)
    ledger.init_dataset("new", epsilon=1.0, delta=DELTA)  # a new name still works
    assert ledger.status("new").chain_problem is None
