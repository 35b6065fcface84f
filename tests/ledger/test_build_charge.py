"""The ledger's rules for one build (BuildCharge), on a real SQLite ledger."""

from __future__ import annotations

import sqlite3

import pytest

from dpmtv.errors import BudgetExceededError, LedgerError, ParameterError
from dpmtv.ledger.book import Ledger
from dpmtv.ledger.build_charge import BuildCharge, void_reason
from dpmtv.pipeline.settings import BuildSettings
from dpmtv.privacy import gaussian_release_event

SETTINGS = BuildSettings(epsilon=1.0, delta=1e-5, l2_clip_norm=(1.0,), shots_per_chunk=4)
UNIT = {"neighbouring_relation": "replace-one", "privacy_unit": "record"}


@pytest.fixture
def ledger(tmp_path) -> Ledger:
    book = Ledger(tmp_path / "budget.sqlite")
    book.init_dataset("clinic", epsilon=2.0, delta=1e-5)
    return book


def _charge(ledger, reason=None) -> BuildCharge:
    return BuildCharge(ledger, "clinic", void_reason=reason, timeout_s=1.0)


def test_a_build_without_a_guarantee_is_refused_or_voids_with_the_switch():
    assert void_reason(non_private=False, insecure_seed=None, dataset="clinic", void_budget=False) is None
    assert void_reason(non_private=True, insecure_seed=None, dataset=None, void_budget=False) is None
    with pytest.raises(ParameterError, match="--void-budget to record it"):
        void_reason(non_private=True, insecure_seed=None, dataset="clinic", void_budget=False)
    with pytest.raises(ParameterError, match="--void-budget is only for"):
        void_reason(non_private=False, insecure_seed=None, dataset="clinic", void_budget=True)
    reason = void_reason(non_private=False, insecure_seed=7, dataset="clinic", void_budget=True)
    assert "--insecure-seeded-noise 7" in reason


def test_check_refuses_an_unknown_dataset_and_another_relation(ledger):
    with pytest.raises(ParameterError, match="no dataset 'other'"):
        BuildCharge(ledger, "other", void_reason=None, timeout_s=1.0).check(**UNIT, on_wait=print)
    with pytest.raises(ParameterError, match="was created for replace-one"):
        _charge(ledger).check(neighbouring_relation="add-remove-one", privacy_unit="record", on_wait=print)
    _charge(ledger).check(**UNIT, on_wait=print)  # the dataset's own relation and unit pass


def test_failure_before_the_charge_charges_nothing_and_after_it_the_charge_stands(ledger):
    charge = _charge(ledger)
    callback = charge.callback(SETTINGS, model="tiny", library_version="0", artifact=None)
    assert charge.failure_message(RuntimeError("boom")) is None  # nothing charged yet
    with pytest.raises(LedgerError, match="nothing was charged"):
        charge.failure_message(sqlite3.OperationalError("database is locked"))
    callback(gaussian_release_event(noise_multiplier=3.0))
    message = charge.failure_message(RuntimeError("boom"))
    assert "was charged to dataset 'clinic'" in message and "the charge stands" in message
    assert len(charge.status().charges) == 1
    with pytest.raises(BudgetExceededError, match="already charged"):
        callback(gaussian_release_event(noise_multiplier=3.0))


def test_a_voiding_build_voids_the_dataset_and_says_so(ledger):
    charge = _charge(ledger, reason="a --non-private build (no noise)")
    callback = charge.callback(SETTINGS, model="tiny", library_version="0", artifact=None)
    callback(gaussian_release_event(noise_multiplier=3.0))
    assert charge.status().void
    assert "dataset 'clinic' was voided" in charge.failure_message(RuntimeError("boom"))
