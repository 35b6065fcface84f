"""The audit on the release as implemented: correct passes, deliberately broken ones are flagged.

Statistical assertions: every audit here is seeded (deterministic). Their justification:
``ε_lower <= ε_claimed`` fails for a correct mechanism with probability <= 1 − confidence (the
Clopper–Pearson argument of dpmtv.audit.stats), and the broken mechanisms are flagged with a
wide margin — measured over 15 unseeded runs each (2000 trials, ε = 1): small-noise gave
ε_lower in [1.22, 1.93], no-clip reaches the maximum detectable ε (5.6).
"""

from __future__ import annotations

import numpy as np
import pytest

from dpmtv.audit import MECHANISMS, audit_chunk_vectors, audit_synthetic
from dpmtv.errors import ParameterError
from dpmtv.privacy import CsprngNumpyGaussianSampler, l2_sensitivity, plan_gaussian_release

DELTA = 1e-5


@pytest.mark.parametrize("epsilon", [1.0, 4.0])
def test_correct_mechanism_is_not_flagged(epsilon):
    """At confidence 0.999 a correct mechanism is flagged with probability <= 1e-3."""
    point = audit_synthetic(
        epsilon=epsilon, delta=DELTA, trials=2000, num_chunks=8, confidence=0.999, seed=11
    )
    assert not point.violation and 0.0 <= point.epsilon_lower <= epsilon
    assert point.shift_norm == pytest.approx(point.l2_sensitivity, rel=1e-9)  # the canary is worst-case
    assert point.epsilon_canary == pytest.approx(epsilon, abs=1e-3)  # so the limit is the claim
    if epsilon >= 4:  # and the audit has power where 1000 held-out trials can show it
        assert point.epsilon_lower > 0.5


def test_noise_std_is_the_librarys_plan():
    point = audit_synthetic(epsilon=2.0, delta=DELTA, trials=40, num_chunks=8, layer_dims={3: 8}, seed=0)
    sensitivity = l2_sensitivity(l2_clip_norms=[1.0], num_chunks=8, relation="replace-one")
    plan = plan_gaussian_release(
        l2_sensitivity=sensitivity, epsilon=2.0, delta=DELTA, sampler=CsprngNumpyGaussianSampler()
    )
    assert point.l2_sensitivity == sensitivity and point.noise_std == plan.noise_std


def test_too_little_noise_is_flagged():
    point = audit_synthetic(
        epsilon=1.0, delta=DELTA, trials=2000, num_chunks=8, mechanism=MECHANISMS["small-noise"], seed=12
    )
    assert point.violation and point.epsilon_lower > 1.0
    assert point.epsilon_canary > 4.0  # σ/4: the true loss of this pair is far above the claim


def test_disabled_clipping_is_flagged():
    point = audit_synthetic(
        epsilon=1.0, delta=DELTA, trials=1000, num_chunks=8, mechanism=MECHANISMS["no-clip"], seed=13
    )
    assert point.violation and point.shift_norm > 10 * point.l2_sensitivity


def _antipodal_rows(num_chunks=8, dim=16, clip=1.0):
    rng = np.random.default_rng(0)
    rows = {0: rng.normal(size=(num_chunks, dim)) * 3.0, 5: rng.normal(size=(num_chunks, dim)) * 3.0}
    with_canary = {layer: r.copy() for layer, r in rows.items()}
    for layer in with_canary:
        with_canary[layer][2] = -50.0 * rows[layer][2]  # clips to the antipode of chunk 2's vector
    return rows, with_canary, {0: clip, 5: clip}


def test_fixed_chunk_vectors_correct_and_broken():
    without, with_, clip = _antipodal_rows()
    correct = audit_chunk_vectors(
        without, with_, l2_clip_norms=clip, epsilon=1.0, delta=DELTA, trials=1000, seed=1
    )
    assert not correct.violation and correct.shift_norm == pytest.approx(correct.l2_sensitivity, rel=1e-9)
    broken = audit_chunk_vectors(
        without,
        with_,
        l2_clip_norms=clip,
        epsilon=1.0,
        delta=DELTA,
        trials=1000,
        mechanism=MECHANISMS["no-clip"],
        seed=1,
    )
    assert broken.violation


def test_bad_inputs():
    without, with_, clip = _antipodal_rows()
    with pytest.raises(ParameterError, match="trials"):
        audit_chunk_vectors(without, with_, l2_clip_norms=clip, epsilon=1.0, delta=DELTA, trials=5)
    with pytest.raises(ParameterError, match="layers"):
        audit_chunk_vectors(without, {0: with_[0]}, l2_clip_norms=clip, epsilon=1.0, delta=DELTA, trials=50)
    with pytest.raises(ParameterError, match="shape"):
        audit_chunk_vectors(
            without, {0: with_[0][:3], 5: with_[5]}, l2_clip_norms=clip, epsilon=1.0, delta=DELTA, trials=50
        )
    with pytest.raises(ParameterError, match="l2_clip_norms names layers"):
        audit_chunk_vectors(without, with_, l2_clip_norms={0: 1.0}, epsilon=1.0, delta=DELTA, trials=50)
    with pytest.raises(ParameterError, match="nothing to audit"):
        audit_chunk_vectors(without, without, l2_clip_norms=clip, epsilon=1.0, delta=DELTA, trials=50)
