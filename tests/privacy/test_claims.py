"""What a release claims: seeded noise carries no guarantee, the CSPRNG sampler draws from the OS
CSPRNG only."""

from __future__ import annotations

import numpy as np
import pytest

from dpmtv.privacy import (
    CsprngNumpyGaussianSampler,
    OpenDPGaussianSampler,
    SeededGaussianSampler,
    draw_gaussian_noise,
    plan_gaussian_release,
)
from dpmtv.privacy import noise as noise_module


def test_a_seeded_release_claims_no_guarantee():
    """Whoever knows the seed regenerates the noise and recovers the exact mean: not private."""
    plan = plan_gaussian_release(
        l2_sensitivity=0.2, epsilon=1.0, delta=1e-5, sampler=SeededGaussianSampler(3)
    )
    assert plan.noise_std > 0  # still noised (an experiment at this σ)
    assert plan.private is False
    assert plan.to_metadata()["private"] is False


@pytest.mark.parametrize("sampler", [OpenDPGaussianSampler(), CsprngNumpyGaussianSampler()])
def test_a_secure_release_claims_its_guarantee(sampler):
    plan = plan_gaussian_release(l2_sensitivity=0.2, epsilon=1.0, delta=1e-5, sampler=sampler)
    assert plan.private is True and plan.to_metadata()["private"] is True


def test_csprng_sampler_draws_only_os_csprng_bytes(monkeypatch):
    """The sampler's only randomness is ``secrets.token_bytes`` (the OS CSPRNG): with the bytes
    fixed, its output is the Box–Muller transform of exactly those bytes."""
    fixed = np.random.default_rng(0).integers(0, 2**63, size=8, dtype=np.uint64)
    requested = []

    def token_bytes(n):
        requested.append(n)
        return fixed.tobytes()[:n]

    monkeypatch.setattr(noise_module.secrets, "token_bytes", token_bytes)
    noise = draw_gaussian_noise(4, noise_std=2.0, sampler=CsprngNumpyGaussianSampler())
    a, b = fixed[:4], fixed[4:]
    u1 = ((a >> np.uint64(11)).astype(np.float64) + 1.0) * 2.0**-53  # (0, 1]
    u2 = (b >> np.uint64(11)).astype(np.float64) * 2.0**-53  # [0, 1)
    expected = 2.0 * np.sqrt(-2.0 * np.log(u1)) * np.cos(2.0 * np.pi * u2)
    assert requested == [64]
    np.testing.assert_allclose(noise, expected, rtol=1e-15, atol=0)
