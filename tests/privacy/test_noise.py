"""Noise samplers: distribution, dangerous-mode switches, reproducibility, OpenDP's map."""

from __future__ import annotations

import numpy as np
import opendp.prelude as dp
import pytest
from scipy import stats

from dpmtv.errors import DangerousModeError, NumericalError, ParameterError
from dpmtv.privacy import (
    CsprngNumpyGaussianSampler,
    NoiseSampler,
    OpenDPGaussianSampler,
    SeededGaussianSampler,
    analytic_gaussian_noise_multiplier,
    draw_gaussian_noise,
    make_sampler,
    opendp_noise_std,
    perturb_with_gaussian,
)
from dpmtv.privacy import noise as noise_module

KS_ALPHA = 1e-6


@pytest.mark.parametrize("sampler", [OpenDPGaussianSampler(), CsprngNumpyGaussianSampler()])
def test_secure_sampler_is_standard_normal_after_scaling(sampler):
    """KS test of noise/σ against N(0, 1), n = 20000, α = 1e-6.

    Under a correct sampler the p-value is uniform, so this test fails spuriously with
    probability 1e-6 per run (per sampler).
    """
    sigma = 2.5
    noise = draw_gaussian_noise(20_000, noise_std=sigma, sampler=sampler)
    assert noise.dtype == np.float64 and noise.shape == (20_000,)
    assert stats.kstest(noise / sigma, "norm").pvalue > KS_ALPHA


def test_samplers_declare_security():
    assert OpenDPGaussianSampler().secure and OpenDPGaussianSampler().floating_point_safe
    assert CsprngNumpyGaussianSampler().secure
    assert not CsprngNumpyGaussianSampler().floating_point_safe
    assert not SeededGaussianSampler(1).secure
    for sampler in (
        OpenDPGaussianSampler(),
        CsprngNumpyGaussianSampler(),
        SeededGaussianSampler(1),
    ):
        assert isinstance(sampler, NoiseSampler)


def test_opendp_sampler_chunks_calls(monkeypatch):
    monkeypatch.setattr(noise_module, "OPENDP_CHUNK", 1000)
    noise = draw_gaussian_noise(2500, noise_std=1.0, sampler=OpenDPGaussianSampler())
    assert noise.shape == (2500,)
    assert len(np.unique(noise)) == 2500  # chunks are independent draws, not repeats


def test_seed_requires_the_switch():
    with pytest.raises(DangerousModeError) as info:
        make_sampler("opendp", seed=3, allow_insecure_seed=False)
    message = str(info.value)
    assert "--insecure-seeded-noise" in message and "allow_insecure_seed=True" in message


def test_make_sampler_names():
    assert isinstance(make_sampler("opendp", seed=None, allow_insecure_seed=False), OpenDPGaussianSampler)
    assert isinstance(
        make_sampler("csprng-numpy", seed=None, allow_insecure_seed=False),
        CsprngNumpyGaussianSampler,
    )
    seeded = make_sampler("csprng-numpy", seed=3, allow_insecure_seed=True)
    assert isinstance(seeded, SeededGaussianSampler) and not seeded.secure
    with pytest.raises(ParameterError, match="unknown noise sampler 'gauss'"):
        make_sampler("gauss", seed=None, allow_insecure_seed=False)


def test_seeded_sampler_is_reproducible():
    a = draw_gaussian_noise(100, noise_std=1.0, sampler=SeededGaussianSampler(7))
    b = draw_gaussian_noise(100, noise_std=1.0, sampler=SeededGaussianSampler(7))
    c = draw_gaussian_noise(100, noise_std=1.0, sampler=SeededGaussianSampler(8))
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, c)


def test_secure_samplers_are_not_reproducible():
    for sampler in (OpenDPGaussianSampler(), CsprngNumpyGaussianSampler()):
        a = draw_gaussian_noise(50, noise_std=1.0, sampler=sampler)
        b = draw_gaussian_noise(50, noise_std=1.0, sampler=sampler)
        assert not np.array_equal(a, b)


@pytest.mark.parametrize("bad", [0.0, -1.0, float("inf"), float("nan")])
def test_draw_rejects_bad_std(bad):
    with pytest.raises(ParameterError, match="noise_std"):
        draw_gaussian_noise(3, noise_std=bad, sampler=CsprngNumpyGaussianSampler())


def test_draw_zero_values():
    assert draw_gaussian_noise(0, noise_std=1.0, sampler=OpenDPGaussianSampler()).shape == (0,)


def _opendp_certifies(scale, l2_sensitivity, epsilon, delta):
    """An independent construction of OpenDP's (ε, δ) map for the Gaussian on vectors."""
    dp.enable_features("contrib")
    space = dp.vector_domain(dp.atom_domain(T=float, nan=False)), dp.l2_distance(T=float)
    measurement = dp.c.make_fix_delta(
        dp.c.make_zCDP_to_approxDP(dp.m.make_gaussian(*space, scale=scale)), delta=delta
    )
    eps, dlt = measurement.map(l2_sensitivity)
    return eps <= epsilon and dlt <= delta


@pytest.mark.parametrize(
    ("l2_sensitivity", "epsilon", "delta"), [(1.0, 1.0, 1e-5), (0.01, 0.5, 1e-7), (40.0, 4.0, 1e-3)]
)
def test_opendp_noise_std_certifies_and_exceeds_analytic(l2_sensitivity, epsilon, delta):
    scale = opendp_noise_std(l2_sensitivity=l2_sensitivity, epsilon=epsilon, delta=delta)
    analytic = l2_sensitivity * analytic_gaussian_noise_multiplier(epsilon=epsilon, delta=delta)
    assert scale >= analytic
    assert _opendp_certifies(scale, l2_sensitivity, epsilon, delta)
    assert not _opendp_certifies(scale * (1 - 1e-3), l2_sensitivity, epsilon, delta)  # smallest


def test_opendp_noise_std_validates():
    with pytest.raises(ParameterError, match="l2_sensitivity"):
        opendp_noise_std(l2_sensitivity=0.0, epsilon=1.0, delta=1e-5)
    with pytest.raises(ParameterError, match="delta"):
        opendp_noise_std(l2_sensitivity=1.0, epsilon=1.0, delta=1.0)


def test_opendp_perturbs_the_values_themselves_not_zero_plus_noise(monkeypatch):
    """Floating-point safety needs OpenDP's mechanism applied to the data vector: check the
    measurement receives the actual values (and that the result is centered on them)."""
    seen = []
    real = noise_module._opendp_gaussian

    def spy(noise_std):
        measurement = real(noise_std)
        return lambda values: seen.append(list(values)) or measurement(values)

    monkeypatch.setattr(noise_module, "_opendp_gaussian", spy)
    values = np.array([1000.0, -1000.0, 0.5])
    noisy = perturb_with_gaussian(values, noise_std=1e-3, sampler=OpenDPGaussianSampler())
    assert seen == [values.tolist()]
    np.testing.assert_allclose(noisy, values, atol=0.01)


def test_perturb_refuses_non_finite_values():
    with pytest.raises(NumericalError, match="finite"):
        perturb_with_gaussian(np.array([np.nan]), noise_std=1.0, sampler=CsprngNumpyGaussianSampler())
