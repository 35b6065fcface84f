"""The budget ledger: refusal at the edge, composition, real concurrent processes, crash safety."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import dp_accounting
import pytest
from dp_accounting.pld import pld_privacy_accountant

from dpmtv.errors import BudgetExceededError, DpmtvError, LedgerError, ParameterError
from dpmtv.ledger.book import Ledger, composed_epsilon
from dpmtv.ledger.charge import LedgerCharge
from dpmtv.privacy import gaussian_release_event
from dpmtv.privacy.disjoint import DisjointReleases

DELTA = 1e-5
Z = 3.0  # a Gaussian release with noise multiplier 3 (ε ≈ 1.27 at δ = 1e-5)
UNIT = {"neighbouring_relation": "replace-one", "privacy_unit": "record"}  # the defaults


@pytest.fixture
def ledger(tmp_path) -> Ledger:
    return Ledger(tmp_path / "ledger" / "budget.sqlite")


def _event(z: float = Z) -> dp_accounting.DpEvent:
    return gaussian_release_event(noise_multiplier=z)


def _charge(ledger: Ledger, name: str = "ds", z: float = Z, **kw):
    return ledger.charge(
        name, _event(z), **UNIT, parameters={"epsilon": 1.0, "note": "test"}, artifact=None, **kw
    )


def test_init_and_empty_status(ledger):
    status = ledger.init_dataset("ds", epsilon=2.0, delta=DELTA)
    assert (status.epsilon_budget, status.delta, status.epsilon_spent, status.charges) == (
        2.0,
        DELTA,
        0.0,
        (),
    )
    assert ledger.datasets() == ["ds"]
    with pytest.raises(ParameterError, match="already exists"):
        ledger.init_dataset("ds", epsilon=5.0, delta=DELTA)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [({"epsilon": 0.0, "delta": DELTA}, "epsilon"), ({"epsilon": 1.0, "delta": 1.0}, "delta")],
)
def test_init_refuses_bad_budget(ledger, kwargs, match):
    with pytest.raises(ParameterError, match=match):
        ledger.init_dataset("ds", **kwargs)


def test_missing_ledger_and_unknown_dataset(ledger):
    with pytest.raises(LedgerError, match="no ledger at"):
        ledger.status("ds")
    assert not ledger.path.exists()  # a typo must not create an empty ledger
    ledger.init_dataset("ds", epsilon=1.0, delta=DELTA)
    with pytest.raises(ParameterError, match="no dataset 'other'.*known: \\['ds'\\]"):
        _charge(ledger, "other")


def test_not_a_ledger_file(tmp_path):
    path = tmp_path / "junk.sqlite"
    path.write_bytes(b"this is not sqlite" * 100)
    with pytest.raises(LedgerError, match="junk.sqlite"):
        Ledger(path).status("ds")


def test_refusal_at_the_budget_edge(ledger):
    """A budget exactly equal to the composition of two charges admits two, refuses the third."""
    edge = composed_epsilon([_event(), _event()], delta=DELTA)
    ledger.init_dataset("edge", epsilon=edge, delta=DELTA)
    first, second = _charge(ledger, "edge"), _charge(ledger, "edge")
    assert first.epsilon_spent < second.epsilon_spent == edge
    with pytest.raises(BudgetExceededError) as info:
        _charge(ledger, "edge")
    message = str(info.value)
    assert f"{edge:.6g}" in message and "remaining 0" in message and "Nothing was charged" in message
    assert len(ledger.status("edge").charges) == 2


def test_refusal_just_below_the_edge_names_the_remaining_budget(ledger):
    edge = composed_epsilon([_event(), _event()], delta=DELTA)
    ledger.init_dataset("tight", epsilon=edge - 1e-9, delta=DELTA)
    one = _charge(ledger, "tight")
    with pytest.raises(BudgetExceededError) as info:
        _charge(ledger, "tight")
    remaining = edge - 1e-9 - one.epsilon_spent
    assert f"spent epsilon = {one.epsilon_spent:.6g}" in str(info.value)
    assert f"remaining {remaining:.6g}" in str(info.value)
    assert [c.charge_id for c in ledger.status("tight").charges] == [one.charge_id]


def test_check_charge_previews_without_charging(ledger):
    ledger.init_dataset("ds", epsilon=composed_epsilon([_event()], delta=DELTA), delta=DELTA)
    assert ledger.check_charge("ds", _event(), **UNIT) == composed_epsilon([_event()], delta=DELTA)
    assert ledger.status("ds").charges == ()
    _charge(ledger)
    with pytest.raises(BudgetExceededError, match="remaining 0"):
        ledger.check_charge("ds", _event(), **UNIT)


def test_ledger_charge_is_a_before_noise_callback(ledger):
    ledger.init_dataset("ds", epsilon=composed_epsilon([_event()], delta=DELTA), delta=DELTA)
    hook = LedgerCharge(ledger, "ds", **UNIT, parameters={"shots_per_chunk": 4}, artifact="v.safetensors")
    assert hook.preview(_event()) == composed_epsilon([_event()], delta=DELTA)
    receipt = hook(_event())
    with pytest.raises(BudgetExceededError, match="already charged"):
        hook(_event())
    hook.mark_written()
    (charge,) = ledger.status("ds").charges
    assert charge.charge_id == receipt.charge_id and charge.written_at is not None
    refused = LedgerCharge(ledger, "ds", **UNIT, parameters={}, artifact=None)
    with pytest.raises(BudgetExceededError):
        refused(_event())
    refused.mark_written()  # nothing charged: nothing to mark
    assert len(ledger.status("ds").charges) == 1


def test_non_private_event_is_refused(ledger):
    ledger.init_dataset("ds", epsilon=100.0, delta=DELTA)
    with pytest.raises(BudgetExceededError, match="inf"):
        ledger.charge("ds", dp_accounting.NonPrivateDpEvent(), **UNIT, parameters={}, artifact=None)
    assert ledger.status("ds").charges == ()


def test_composition_matches_an_independent_accountant(ledger):
    events = [
        _event(3.0),
        _event(5.0),
        dp_accounting.ComposedDpEvent([_event(4.0), dp_accounting.LaplaceDpEvent(0.5)]),
    ]
    ledger.init_dataset("ds", epsilon=50.0, delta=DELTA)
    for event in events:
        ledger.charge("ds", event, **UNIT, parameters={}, artifact=None)
    independent = pld_privacy_accountant.PLDAccountant(
        dp_accounting.NeighboringRelation.ADD_OR_REMOVE_ONE, value_discretization_interval=1e-3
    )
    for event in events:
        independent.compose(event)
    status = ledger.status("ds")
    assert status.epsilon_spent == pytest.approx(independent.get_epsilon(DELTA), rel=1e-9)
    assert status.charges[-1].epsilon_after == status.epsilon_spent


def test_composition_of_identical_gaussians_matches_the_analytic_value(ledger):
    """k releases of multiplier z compose to one of z/sqrt(k) (exact for Gaussians); the PLD
    estimate is pessimistic, so it is at or slightly above the analytic ε."""
    ledger.init_dataset("ds", epsilon=50.0, delta=DELTA)
    for _ in range(4):
        _charge(ledger)
    analytic = dp_accounting.get_epsilon_gaussian(Z / 2.0, DELTA)
    spent = ledger.status("ds").epsilon_spent
    assert analytic - 1e-9 <= spent <= analytic + 2e-3


def test_stores_events_parameters_artifact_and_marks_written(ledger):
    ledger.init_dataset("ds", epsilon=10.0, delta=DELTA)
    receipt = ledger.charge(
        "ds", _event(), **UNIT, parameters={"l2_clip_norm": [1.5]}, artifact="out.safetensors"
    )
    charge = ledger.status("ds").charges[0]
    assert charge.event == _event() and charge.parameters == {"l2_clip_norm": [1.5]}
    assert charge.artifact == str(Path("out.safetensors").resolve()) and charge.written_at is None
    ledger.mark_written(receipt, artifact="final.safetensors", tensors_sha256="ab" * 32)
    charge = ledger.status("ds").charges[0]
    assert charge.written_at is not None and charge.artifact == str(Path("final.safetensors").resolve())
    assert charge.tensors_sha256 == "ab" * 32
    with pytest.raises(ParameterError, match="no charge"):
        ledger.mark_written("nope")
    json.dumps(ledger.status("ds").to_json())  # JSON-ready


def test_bad_parameters_and_events_charge_nothing(ledger):
    ledger.init_dataset("ds", epsilon=10.0, delta=DELTA)
    with pytest.raises(ParameterError, match="JSON"):
        ledger.charge("ds", _event(), **UNIT, parameters={"x": object()}, artifact=None)
    with pytest.raises(ParameterError, match="DpEvent"):
        ledger.charge("ds", "gaussian", **UNIT, parameters={}, artifact=None)
    assert ledger.status("ds").charges == ()


def test_failure_inside_the_transaction_rolls_back(ledger, monkeypatch):
    import dpmtv.ledger.book as module

    ledger.init_dataset("ds", epsilon=10.0, delta=DELTA)
    real = module._now

    def failing_now():
        raise RuntimeError("disk on fire")

    monkeypatch.setattr(module, "_now", failing_now)
    with pytest.raises(RuntimeError):
        _charge(ledger)
    monkeypatch.setattr(module, "_now", real)
    assert ledger.status("ds").charges == ()


def test_writer_lock_makes_a_charge_wait_for_the_other(ledger):
    """While another connection holds the write lock, a charge waits (busy timeout) or fails
    cleanly; it never reads the state behind the holder's back."""
    ledger.init_dataset("ds", epsilon=10.0, delta=DELTA)
    holder = sqlite3.connect(ledger.path, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    try:
        with pytest.raises(sqlite3.OperationalError, match="locked"):
            _charge(Ledger(ledger.path, busy_timeout_s=0.2))
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert ledger.status("ds").charges == ()


_RACER = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    from dpmtv.errors import BudgetExceededError
    from dpmtv.privacy import gaussian_release_event
    from dpmtv.ledger.book import Ledger

    ledger, folder, index, z = Ledger(sys.argv[1]), Path(sys.argv[2]), sys.argv[3], float(sys.argv[4])
    (folder / f"ready-{index}").touch()
    while not (folder / "go").exists():
        time.sleep(0.001)
    try:
        ledger.charge("race", gaussian_release_event(noise_multiplier=z), neighbouring_relation="replace-one",
                      privacy_unit="record", parameters={"racer": index}, artifact=f"out-{index}")
    except BudgetExceededError:
        print("refused")
    else:
        print("charged")
    """
)


def _spawn(script: str, *args: str) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2] / "src")}
    return subprocess.Popen(
        [sys.executable, "-c", script, *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )


@pytest.mark.slow  # 7-13 s: five interpreters importing dp-accounting on two shared cores
def test_concurrent_processes_never_overspend(ledger, tmp_path):
    """Five builder processes, released at once, race for a budget that admits exactly two
    charges. (With a deferred BEGIN instead of BEGIN IMMEDIATE this test fails: the racers'
    read-then-write upgrades collide with "database is locked".)"""
    racers, admitted = 5, 2
    budget = composed_epsilon([_event()] * admitted, delta=DELTA)
    ledger.init_dataset("race", epsilon=budget, delta=DELTA)
    folder = tmp_path / "sync"
    folder.mkdir()
    procs = [_spawn(_RACER, str(ledger.path), str(folder), str(i), str(Z)) for i in range(racers)]
    deadline = time.monotonic() + 120
    while len(list(folder.glob("ready-*"))) < racers and time.monotonic() < deadline:
        time.sleep(0.01)
    (folder / "go").touch()  # release all racers at once
    outputs = [p.communicate(timeout=180) for p in procs]
    results = [out.strip() for out, _ in outputs]
    assert all(p.returncode == 0 for p in procs), [err for _, err in outputs]
    assert sorted(results) == ["charged"] * admitted + ["refused"] * (racers - admitted)
    status = ledger.status("race")
    assert len(status.charges) == admitted and status.epsilon_spent <= budget
    assert [c.epsilon_after for c in status.charges] == sorted(c.epsilon_after for c in status.charges)


_CRASHER = textwrap.dedent(
    """
    import os, sys
    from dpmtv.privacy import gaussian_release_event
    from dpmtv.ledger.book import Ledger

    Ledger(sys.argv[1]).charge("ds", gaussian_release_event(noise_multiplier=3.0),
                               neighbouring_relation="replace-one", privacy_unit="record",
                               parameters={}, artifact="never-written.safetensors")
    os._exit(3)  # the build dies between the charge and writing the artifact
    """
)


def test_crash_between_charge_and_write_keeps_the_charge(ledger):
    ledger.init_dataset("ds", epsilon=10.0, delta=DELTA)
    proc = _spawn(_CRASHER, str(ledger.path))
    proc.communicate(timeout=120)
    assert proc.returncode == 3
    (charge,) = ledger.status("ds").charges
    assert charge.artifact.endswith("/never-written.safetensors") and charge.written_at is None
    assert ledger.status("ds").epsilon_spent == composed_epsilon([_event(3.0)], delta=DELTA)


# -- relation and unit, disjoint charges, voids, format upgrade --------------------------------


def test_relation_and_unit_are_fixed_at_init(ledger):
    status = ledger.init_dataset(
        "users", epsilon=5.0, delta=DELTA, neighbouring_relation="add-remove-one", privacy_unit="user"
    )
    assert (status.neighbouring_relation, status.privacy_unit) == ("add-remove-one", "user")
    for relation, unit in [("replace-one", "user"), ("add-remove-one", "record"), ("replace-one", "record")]:
        with pytest.raises(ParameterError, match="add-remove-one per user"):
            ledger.charge(
                "users",
                _event(),
                neighbouring_relation=relation,
                privacy_unit=unit,
                parameters={},
                artifact=None,
            )
        with pytest.raises(ParameterError, match="add-remove-one per user"):
            ledger.check_charge("users", _event(), neighbouring_relation=relation, privacy_unit=unit)
    assert ledger.status("users").charges == ()
    ledger.charge(
        "users",
        _event(),
        neighbouring_relation="add-remove-one",
        privacy_unit="user",
        parameters={},
        artifact=None,
    )
    assert len(ledger.status("users").charges) == 1
    with pytest.raises(ParameterError, match="privacy unit"):
        ledger.init_dataset("bad", epsilon=1.0, delta=DELTA, privacy_unit="family")
    with pytest.raises(ParameterError, match="relation"):
        ledger.init_dataset("bad", epsilon=1.0, delta=DELTA, neighbouring_relation="swap-two")


def test_check_dataset_refuses_what_a_build_cannot_charge(ledger):
    ledger.init_dataset("ds", epsilon=composed_epsilon([_event()], delta=DELTA), delta=DELTA)
    assert ledger.check_dataset("ds", **UNIT).charges == ()
    with pytest.raises(ParameterError, match="no dataset 'other'"):
        ledger.check_dataset("other", **UNIT)
    with pytest.raises(ParameterError, match="replace-one per record"):
        ledger.check_dataset("ds", neighbouring_relation="add-remove-one", privacy_unit="record")
    _charge(ledger)
    with pytest.raises(BudgetExceededError, match="nothing is left"):
        ledger.check_dataset("ds", **UNIT)


def _selection_event(epsilon: float = 1.0, k: int = 2) -> dp_accounting.DpEvent:
    """Private head selection's event: k rounds of the ε/k-DP exponential mechanism."""
    from dpmtv.privacy.noisy_top_k import noisy_top_k_event

    return noisy_top_k_event(epsilon=epsilon, k=k)


def _independent_epsilon(events) -> float:
    accountant = pld_privacy_accountant.PLDAccountant(
        dp_accounting.NeighboringRelation.ADD_OR_REMOVE_ONE, value_discretization_interval=1e-3
    )
    for event in events:
        accountant.compose(event)
    return accountant.get_epsilon(DELTA)


def test_a_disjoint_charge_costs_its_worse_alternative_not_their_composition(ledger):
    selection, release = _selection_event(), _event(3.7)
    ledger.init_dataset("ds", epsilon=1.02, delta=DELTA)  # fits max(1.0, 1.009), not their composition
    charged = DisjointReleases((selection, release))
    assert charged.epsilon(delta=DELTA) == max(
        _independent_epsilon([selection]), _independent_epsilon([release])
    )
    assert _independent_epsilon([selection, release]) > 1.02
    receipt = ledger.charge("ds", charged, **UNIT, parameters={}, artifact=None)
    status = ledger.status("ds")
    assert receipt.epsilon_spent == status.epsilon_spent == pytest.approx(1.009, abs=1e-3)
    assert status.charges[0].event == charged  # both alternatives kept
    json.dumps(status.to_json())


def test_disjoint_alternatives_are_composed_as_alternatives(ledger):
    """The Gaussian alternative is the worse one alone (1.009 > 1.000 at δ), but composed with
    four Gaussians the selection alternative costs more (3.60 > 3.00): charging only the worse-
    alone event would undercount. The ledger takes the maximum over both compositions."""
    selection, release, others = _selection_event(), _event(3.7), [_event(3.0)] * 4
    assert _independent_epsilon([release]) > _independent_epsilon([selection])
    with_release, with_selection = (
        _independent_epsilon([*others, release]),
        _independent_epsilon([*others, selection]),
    )
    assert with_selection > with_release + 0.5
    ledger.init_dataset("ds", epsilon=50.0, delta=DELTA)
    for event in others:
        ledger.charge("ds", event, **UNIT, parameters={}, artifact=None)
    ledger.charge("ds", DisjointReleases((selection, release)), **UNIT, parameters={}, artifact=None)
    assert ledger.status("ds").epsilon_spent == pytest.approx(with_selection, rel=1e-9)


def test_beyond_max_choices_the_oldest_disjoint_charges_are_composed_in_full(monkeypatch):
    import dpmtv.privacy.disjoint as disjoint

    charges = [
        DisjointReleases((_selection_event(), _event(3.7))),
        DisjointReleases((_event(4.0), _event(5.0))),
    ]
    exact = composed_epsilon(charges, delta=DELTA)
    monkeypatch.setattr(disjoint, "MAX_CHOICES", 2)
    bounded = composed_epsilon(charges, delta=DELTA)
    assert bounded == pytest.approx(
        max(_independent_epsilon([_selection_event(), _event(3.7), e]) for e in (_event(4.0), _event(5.0))),
        rel=1e-9,
    )
    assert bounded >= exact


def test_a_void_is_recorded_for_good(ledger):
    ledger.init_dataset("ds", epsilon=5.0, delta=DELTA)
    assert ledger.status("ds").void is False
    void = ledger.void_dataset(
        "ds", reason="a --non-private build", parameters={"non_private": True}, artifact="v"
    )
    ledger.mark_written(void, tensors_sha256="cd" * 32)
    _charge(ledger)  # later private builds are still charged
    status = ledger.status("ds")
    assert status.void is True and len(status.charges) == 1
    (stored,) = status.voids
    assert stored.reason == "a --non-private build" and stored.artifact == str(Path("v").resolve())
    assert stored.tensors_sha256 == "cd" * 32 and stored.written_at is not None
    assert status.to_json()["void"] is True


def test_a_voiding_ledger_charge_voids_instead_of_charging(ledger):
    ledger.init_dataset("ds", epsilon=1.0, delta=DELTA)
    hook = LedgerCharge(ledger, "ds", **UNIT, parameters={}, artifact=None, void_reason="seeded noise")
    assert hook.preview(dp_accounting.NonPrivateDpEvent()) is None  # no budget check for a void
    hook(dp_accounting.NonPrivateDpEvent())
    status = ledger.status("ds")
    assert status.void and status.charges == () and status.voids[0].reason == "seeded noise"


_FORMAT_1 = """
CREATE TABLE datasets (name TEXT PRIMARY KEY, epsilon REAL NOT NULL, delta REAL NOT NULL,
    created_at TEXT NOT NULL);
CREATE TABLE charges (seq INTEGER PRIMARY KEY AUTOINCREMENT, charge_id TEXT NOT NULL UNIQUE,
    dataset TEXT NOT NULL REFERENCES datasets(name), event_json TEXT NOT NULL,
    parameters_json TEXT NOT NULL, artifact TEXT, charged_at TEXT NOT NULL,
    epsilon_after REAL NOT NULL, written_at TEXT);
PRAGMA user_version = 1;
"""


def test_a_format_1_ledger_is_upgraded_in_place(tmp_path):
    from dpmtv.privacy import event_to_json

    path = tmp_path / "old.sqlite"
    conn = sqlite3.connect(path)
    conn.executescript(_FORMAT_1)
    event = json.dumps(event_to_json(_event()))
    runs = {
        "plain": [{"neighbouring_relation": "replace-one", "privacy_unit": "record"}],
        "users": [{"neighbouring_relation": "add-remove-one", "privacy_unit": "user"}] * 2,
        "empty": [],
        "python": [{}],
        "mixed": [
            {"neighbouring_relation": "replace-one", "privacy_unit": "record"},
            {"neighbouring_relation": "add-remove-one", "privacy_unit": "record"},
        ],
    }
    for name, charges in runs.items():
        conn.execute("INSERT INTO datasets VALUES (?, 20.0, 1e-5, 'then')", (name,))
        for index, parameters in enumerate(charges):
            conn.execute(
                "INSERT INTO charges (charge_id, dataset, event_json, parameters_json, artifact, charged_at, "
                "epsilon_after) VALUES (?, ?, ?, ?, 'a.safetensors', 'then', 1.0)",
                (f"{name}-{index}", name, event, json.dumps(parameters)),
            )
    conn.commit()
    conn.close()
    ledger = Ledger(path)
    fixed = {
        name: (ledger.status(name).neighbouring_relation, ledger.status(name).privacy_unit) for name in runs
    }
    assert fixed == {
        "plain": ("replace-one", "record"),
        "users": ("add-remove-one", "user"),
        "empty": ("replace-one", "record"),
        "python": ("replace-one", "record"),
        "mixed": ("add-remove-one", "record"),
    }
    assert [name for name in runs if ledger.status(name).void] == ["mixed"]
    assert "different relations" in ledger.status("mixed").voids[0].reason
    users = ledger.status("users")
    assert len(users.charges) == 2 and users.charges[0].tensors_sha256 is None
    assert users.epsilon_spent == composed_epsilon([_event(), _event()], delta=DELTA)
    assert sqlite3.connect(path).execute("PRAGMA user_version").fetchone()[0] == 2
    ledger.charge(
        "users",
        _event(),
        neighbouring_relation="add-remove-one",
        privacy_unit="user",
        parameters={},
        artifact=None,
    )
    assert len(Ledger(path).status("users").charges) == 3


# -- dpmtv budget (CLI) -----------------------------------------------------------------------


def _budget(*args):
    from click.testing import CliRunner

    from dpmtv.cli import main

    return CliRunner().invoke(main, ["budget", *args])


def test_cli_init_show_and_json(tmp_path):
    path = str(tmp_path / "l.sqlite")
    result = _budget("init", "clinic-a", "--epsilon", "3", "--delta", "1e-6", "--ledger", path)
    assert result.exit_code == 0, result.output
    assert "budget ε = 3 at δ = 1e-06" in result.output
    Ledger(path).charge("clinic-a", _event(), **UNIT, parameters={}, artifact="v.safetensors")

    overview = _budget("show", "--ledger", path)
    assert overview.exit_code == 0 and "clinic-a" in overview.output
    detail = _budget("show", "clinic-a", "--ledger", path)
    assert detail.exit_code == 0 and "v.safetensors" in detail.output and "not written" in detail.output
    data = json.loads(_budget("show", "clinic-a", "--ledger", path, "--json").stdout)
    assert data["epsilon_budget"] == 3.0 and data["charges"][0]["event"]["class_name"] == "GaussianDpEvent"
    assert data["epsilon_spent"] == composed_epsilon([_event()], delta=1e-6)
    everything = json.loads(_budget("show", "--ledger", path, "--json").stdout)
    assert [d["name"] for d in everything] == ["clinic-a"]


def test_cli_errors_are_one_line(tmp_path):
    path = str(tmp_path / "l.sqlite")
    assert _budget("init", "a", "--epsilon", "1", "--delta", "1e-5", "--ledger", path).exit_code == 0
    again = _budget("init", "a", "--epsilon", "2", "--delta", "1e-5", "--ledger", path)
    assert again.exit_code == 2 and "already exists" in again.output and "Traceback" not in again.output
    missing = _budget("show", "b", "--ledger", path)
    assert missing.exit_code == 2 and "no dataset 'b'" in missing.output
    bad = _budget("init", "c", "--epsilon", "-1", "--delta", "1e-5", "--ledger", path)
    assert bad.exit_code == 2 and "epsilon" in bad.output


def test_cli_default_ledger_path_and_build_helper(tmp_path, monkeypatch):
    import dpmtv.cli.budget as budget

    monkeypatch.setattr(budget, "user_data_dir", lambda app: str(tmp_path / "data" / app))
    assert budget.default_ledger_path() == tmp_path / "data" / "dpmtv" / "ledger.sqlite"
    assert _budget("init", "x", "--epsilon", "1", "--delta", "1e-5").exit_code == 0
    assert budget.default_ledger_path().is_file()

    assert budget.resolve_build_ledger(None, None) is None
    ledger, name = budget.resolve_build_ledger(None, "x")
    assert ledger.path == budget.default_ledger_path() and name == "x"
    with pytest.raises(ParameterError, match="--dataset"):
        budget.resolve_build_ledger(tmp_path / "l.sqlite", None)


def test_a_foreign_sqlite_file_raises_ledger_error_naming_it(tmp_path):
    path = tmp_path / "budget.sqlite"
    sqlite3.connect(path).execute("CREATE TABLE other (x)").connection.close()  # SQLite, not ours
    with pytest.raises(LedgerError, match="not a dpmtv ledger of format") as raised:
        Ledger(path).status("ds")
    assert str(path) in str(raised.value) and isinstance(raised.value, DpmtvError)
