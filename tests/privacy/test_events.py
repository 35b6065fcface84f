"""Accounting events: the unit-sensitivity convention, the accountant, and the JSON form."""

from __future__ import annotations

import json
import math

import dp_accounting
import pytest
from dp_accounting.pld import pld_privacy_accountant

from dpmtv.errors import ParameterError
from dpmtv.privacy import (
    delta_of,
    epsilon_of,
    event_from_json,
    event_to_json,
    gaussian_release_event,
    make_accountant,
)

SIGMA_1 = 3.7306316348159374  # analytic sigma for (1, 1e-5), sensitivity 1


def _pld_epsilon(relation, noise_multiplier, delta=1e-5):
    accountant = pld_privacy_accountant.PLDAccountant(relation, value_discretization_interval=1e-3)
    accountant.compose(dp_accounting.GaussianDpEvent(noise_multiplier))
    return accountant.get_epsilon(delta)


def test_make_accountant_uses_add_or_remove_one():
    assert make_accountant().neighboring_relation == (dp_accounting.NeighboringRelation.ADD_OR_REMOVE_ONE)


def test_dp_accounting_replace_one_doubles_the_sensitivity():
    """Why our events must be evaluated under ADD_OR_REMOVE_ONE.

    dp-accounting's REPLACE_ONE compares N(-1, z²) with N(+1, z²): a multiplier z under
    REPLACE_ONE is accounted exactly like z/2 under ADD_OR_REMOVE_ONE. Our Δ already contains the
    factor 2 of replace-one, so REPLACE_ONE would count it twice.
    """
    rel = dp_accounting.NeighboringRelation
    replace = _pld_epsilon(rel.REPLACE_ONE, 2 * SIGMA_1)
    add_remove_half = _pld_epsilon(rel.ADD_OR_REMOVE_ONE, SIGMA_1)
    add_remove_full = _pld_epsilon(rel.ADD_OR_REMOVE_ONE, 2 * SIGMA_1)
    assert replace == pytest.approx(add_remove_half, rel=1e-6)
    assert replace == pytest.approx(1.0, rel=1e-6)
    assert add_remove_full < 0.5 * replace  # the same event is worth far less under our convention


def test_epsilon_of_gaussian_golden():
    event = gaussian_release_event(noise_multiplier=SIGMA_1)
    assert epsilon_of(event, delta=1e-5) == pytest.approx(1.0, abs=1e-9)


def test_delta_of_inverts_epsilon_of():
    event = gaussian_release_event(noise_multiplier=2.0)
    eps = epsilon_of(event, delta=1e-6)
    assert delta_of(event, epsilon=eps) == pytest.approx(1e-6, rel=1e-4)


def test_non_private_event_has_infinite_epsilon():
    assert epsilon_of(dp_accounting.NonPrivateDpEvent(), delta=1e-5) == math.inf
    assert epsilon_of(dp_accounting.NoOpDpEvent(), delta=1e-5) == 0.0


@pytest.mark.parametrize("bad", [0.0, -1.0, math.inf, math.nan])
def test_gaussian_event_rejects_bad_multiplier(bad):
    with pytest.raises(ParameterError, match="noise_multiplier"):
        gaussian_release_event(noise_multiplier=bad)


def test_epsilon_of_rejects_bad_delta():
    with pytest.raises(ParameterError, match="delta must be in"):
        epsilon_of(gaussian_release_event(noise_multiplier=1.0), delta=1.5)


EVENTS = [
    dp_accounting.GaussianDpEvent(3.5),
    dp_accounting.LaplaceDpEvent(0.5),
    dp_accounting.NoOpDpEvent(),
    dp_accounting.NonPrivateDpEvent(),
    dp_accounting.SelfComposedDpEvent(dp_accounting.LaplaceDpEvent(2.0), 4),
    dp_accounting.ComposedDpEvent(
        [
            dp_accounting.SelfComposedDpEvent(dp_accounting.LaplaceDpEvent(2.0), 4),
            dp_accounting.GaussianDpEvent(1.25),
            dp_accounting.ComposedDpEvent([dp_accounting.NoOpDpEvent()]),
        ]
    ),
]


@pytest.mark.parametrize("event", EVENTS, ids=lambda e: type(e).__name__)
def test_event_json_round_trip(event):
    text = json.dumps(event_to_json(event))
    assert event_from_json(json.loads(text)) == event


def test_event_json_uses_dp_accounting_names():
    data = event_to_json(dp_accounting.GaussianDpEvent(2.0))
    assert data == {
        "module_name": "dp_accounting.dp_event",
        "class_name": "GaussianDpEvent",
        "noise_multiplier": 2.0,
    }


@pytest.mark.parametrize(
    ("data", "match"),
    [
        ({"module_name": "os", "class_name": "system"}, "not a serialised"),
        (
            {"module_name": "dp_accounting.dp_event", "class_name": "UnsupportedDpEvent"},
            "unsupported event type",
        ),
        (
            {"module_name": "dp_accounting.dp_event", "class_name": "GaussianDpEvent"},
            "needs fields",
        ),
        ("GaussianDpEvent", "not a serialised"),
        # an artifact's JSON may hold any value there; a list is unhashable, not an event name
        (
            {"module_name": "dp_accounting.dp_event", "class_name": ["GaussianDpEvent"]},
            "unsupported event type",
        ),
    ],
)
def test_event_from_json_refuses_unknown_input(data, match):
    with pytest.raises(ParameterError, match=match):
        event_from_json(data)
