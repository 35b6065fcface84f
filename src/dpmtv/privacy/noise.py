"""The one place noise is drawn (docs/design.md §2).

:func:`perturb_with_gaussian` takes the values, a std and a sampler, and returns the values plus
Gaussian noise (float64). The samplers:

==========================  ======  ====================  ====================================
sampler                     secure  floating-point safe   source
==========================  ======  ====================  ====================================
``OpenDPGaussianSampler``   yes     yes                   OpenDP ``make_gaussian`` (default)
``CsprngNumpyGaussianSampler`` yes  no                    OS CSPRNG bytes, Box–Muller in numpy
``SeededGaussianSampler``   NO      no                    numpy PCG64 from a user seed
==========================  ======  ====================  ====================================

"Floating-point safe": naive floating-point Gaussian sampling leaves gaps and irregularities in
the set of reachable outputs that can reveal the un-noised value (Mironov, CCS 2012). OpenDP's
Gaussian mechanism instead samples a discrete Gaussian exactly, on the grid of all float64 values
(granularity ``γ = 2^-1074``, :data:`OPENDP_GRID_LOG2`), from the OS CSPRNG, so the released
floats have the distribution its privacy proof assumes.

Accounting of the OpenDP release (derived in :func:`discrete_gaussian_delta_log2`): the
discrete Gaussian on that grid is within total variation ``d·γ²/σ²`` of a continuous Gaussian
rounded to the grid, so the continuous Gaussian's accounting (analytic / PLD) holds with
``(1 + e^ε)·d·γ²/σ²`` added to δ. The sampler reserves ``δ·2^-40`` of the build's δ for that term
(:meth:`OpenDPGaussianSampler.reserved_delta`) and the calibration uses the rest, so its σ is
the analytic Gaussian's to ~1e-7. OpenDP's own privacy map (zCDP ``ρ = Δ²/(2σ²)``, converted
to (ε, δ) by ``make_zCDP_to_approxDP``) certifies the same sampler only at a larger σ
(:func:`opendp_noise_std`, 4.045 instead of 3.7306 per unit Δ at ε = 1, δ = 1e-5, because zCDP
forgets the exact privacy-loss distribution); it is recorded for reference, not used.

Measured speed (this machine, opendp 0.16, default ``k``): about 16,000 values/s in a single
thread (100,000 values in about 6.3 s), independent of the scale. Calls are chunked into
``OPENDP_CHUNK`` values only to bound the memory of the Python lists OpenDP returns; chunking
does not change the speed. (A coarser grid, e.g. ``k = -40``, samples ~5× faster but makes the
privacy map depend on the vector size; not offered.)
"""

from __future__ import annotations

import math
import secrets
from typing import Protocol, runtime_checkable

import numpy as np
import opendp.prelude as dp
from opendp.mod import Domain, Measurement, Metric

from dpmtv.errors import DangerousModeError, NumericalError, ParameterError
from dpmtv.privacy._checks import check_int, check_positive
from dpmtv.privacy.partition import seeded_rng

__all__ = [
    "OPENDP_CHUNK",
    "OPENDP_GRID_LOG2",
    "CsprngNumpyGaussianSampler",
    "NoiseSampler",
    "OpenDPGaussianSampler",
    "SeededGaussianSampler",
    "discrete_gaussian_delta_log2",
    "draw_gaussian_noise",
    "make_sampler",
    "perturb_with_gaussian",
    "opendp_noise_std",
]

OPENDP_CHUNK = 1 << 16
OPENDP_GRID_LOG2 = -1074  # OpenDP's k: the grid 2^-1074 holds every float64, so no rounding
MAX_VALUES_LOG2 = 40  # public bound on the vector size d the discretisation term is proved for
RESERVED_DELTA_FRACTION = 2.0**-40  # share of δ the OpenDP sampler keeps for the discretisation
SAMPLER_NAMES = ("opendp", "csprng-numpy")


@runtime_checkable
class NoiseSampler(Protocol):
    """A source of i.i.d. ``N(0, noise_std²)`` float64 noise."""

    name: str
    secure: bool
    floating_point_safe: bool

    def perturb(self, values: np.ndarray, *, noise_std: float) -> np.ndarray:
        """``values + N(0, noise_std² I)`` as float64 (a new array)."""
        ...

    def privacy_map_noise_std(self, *, l2_sensitivity: float, epsilon: float, delta: float) -> float | None:
        """The std the sampler's own privacy map needs (reference only), or None if it has none."""
        ...

    def reserved_delta(self, *, delta: float) -> float:
        """The part of δ the sampler keeps for its deviation from the continuous Gaussian (0 for
        a continuous sampler); the calibration spends ``δ − reserved`` on the Gaussian."""
        ...

    def check_reserved_delta(self, *, noise_std: float, epsilon: float, reserved_delta: float) -> None:
        """Raise NumericalError unless the reserve covers the sampler's deviation at this σ."""
        ...


def perturb_with_gaussian(values: np.ndarray, *, noise_std: float, sampler: NoiseSampler) -> np.ndarray:
    """The one place a release is noised: ``values + N(0, noise_std² I)``, float64.

    The sampler receives the values themselves, not only a shape, because floating-point safety
    needs it: OpenDP's mechanism rounds the input onto its grid and adds exact discrete noise
    there, whereas drawing noise around zero and adding it in floating point afterwards would
    reintroduce the rounding artefacts Mironov (CCS 2012) exploits.

    Raises:
        ParameterError: a std that is not finite and > 0.
        NumericalError: non-finite input, or the sampler returned the wrong shape or non-finite
            values.
    """
    noise_std = check_positive("noise_std", noise_std)
    values = np.asarray(values, np.float64)
    if values.ndim != 1 or not np.isfinite(values).all():
        raise NumericalError(f"values to noise must be a finite 1-D vector, got shape {values.shape}")
    noisy = np.asarray(sampler.perturb(values, noise_std=noise_std), np.float64)
    if noisy.shape != values.shape or not np.isfinite(noisy).all():
        raise NumericalError(
            f"sampler {sampler.name!r} returned shape {noisy.shape} or non-finite values "
            f"for {values.size} values"
        )
    return noisy


def draw_gaussian_noise(num_values: int, *, noise_std: float, sampler: NoiseSampler) -> np.ndarray:
    """``num_values`` i.i.d. ``N(0, noise_std²)`` draws: the perturbation of a zero vector
    (for tests and audits; releases go through :func:`perturb_with_gaussian`)."""
    num_values = check_int("num_values", num_values, minimum=0)
    return perturb_with_gaussian(np.zeros(num_values), noise_std=noise_std, sampler=sampler)


class OpenDPGaussianSampler:
    """OpenDP's exact Gaussian sampler (secure, floating-point safe); the default."""

    name = "opendp"
    secure = True
    floating_point_safe = True

    def perturb(self, values: np.ndarray, *, noise_std: float) -> np.ndarray:
        """Apply OpenDP's Gaussian mechanism (scale = ``noise_std``) to the values themselves."""
        if values.size > 2**MAX_VALUES_LOG2:
            raise ParameterError(f"at most 2^{MAX_VALUES_LOG2} values can be noised, got {values.size}")
        measurement = _opendp_gaussian(noise_std)
        out = np.empty(values.size, dtype=np.float64)
        for start in range(0, values.size, OPENDP_CHUNK):
            stop = min(start + OPENDP_CHUNK, values.size)
            out[start:stop] = measurement(values[start:stop].tolist())
        return out

    def privacy_map_noise_std(self, *, l2_sensitivity: float, epsilon: float, delta: float) -> float | None:
        """:func:`opendp_noise_std` for these parameters (OpenDP's zCDP map; reference only)."""
        return opendp_noise_std(l2_sensitivity=l2_sensitivity, epsilon=epsilon, delta=delta)

    def reserved_delta(self, *, delta: float) -> float:
        """``δ·2^-40``: far above the discretisation term, far below anything that moves σ."""
        return float(delta) * RESERVED_DELTA_FRACTION

    def check_reserved_delta(self, *, noise_std: float, epsilon: float, reserved_delta: float) -> None:
        """Check ``(1 + e^ε)·d·γ²/σ² <= reserved`` (:func:`discrete_gaussian_delta_log2`)."""
        bound_log2 = discrete_gaussian_delta_log2(noise_std=noise_std, epsilon=epsilon)
        if not (reserved_delta > 0 and bound_log2 <= math.log2(reserved_delta)):
            raise NumericalError(
                f"noise_std = {noise_std!r} is too small for the discrete Gaussian's accounting: "
                f"its δ term 2^{bound_log2:.1f} exceeds the reserved {reserved_delta!r}"
            )

    def __repr__(self) -> str:
        return "OpenDPGaussianSampler()"


class CsprngNumpyGaussianSampler:
    """Gaussian noise from the OS CSPRNG (``secrets.token_bytes``), transformed in numpy.

    Every draw consumes 16 fresh bytes of the operating system's cryptographic generator
    (``getrandom``/``/dev/urandom``): two 53-bit uniforms ``u1 ∈ (0, 1]``, ``u2 ∈ [0, 1)`` and the
    Box–Muller transform ``sqrt(−2 ln u1)·cos(2π u2)``. Nothing is seeded or stored, so the noise
    cannot be reproduced or predicted. The float64 transform is NOT floating-point safe (Mironov,
    CCS 2012) and its tails stop at ``sqrt(2·53·ln 2) ≈ 8.6σ``; prefer
    :class:`OpenDPGaussianSampler` unless speed matters more.
    """

    name = "csprng-numpy"
    secure = True
    floating_point_safe = False

    def perturb(self, values: np.ndarray, *, noise_std: float) -> np.ndarray:
        """Values plus ``noise_std`` times Box–Muller normals of fresh OS-CSPRNG bytes."""
        return values + noise_std * _csprng_standard_normal(values.size)

    def privacy_map_noise_std(self, **_: float) -> float | None:
        """No own privacy map: the analytic / PLD calibration applies."""
        return None

    def reserved_delta(self, *, delta: float) -> float:
        """Nothing: the continuous Gaussian's accounting applies as it is."""
        return 0.0

    def check_reserved_delta(self, *, noise_std: float, epsilon: float, reserved_delta: float) -> None:
        """Nothing to check."""

    def __repr__(self) -> str:
        return "CsprngNumpyGaussianSampler()"


def _csprng_standard_normal(num_values: int) -> np.ndarray:
    """``num_values`` standard normals from ``16·num_values`` bytes of ``secrets.token_bytes``."""
    words = np.frombuffer(secrets.token_bytes(16 * num_values), dtype=np.uint64)  # (2n,)
    bits = words >> np.uint64(11)  # 53 uniform bits each
    u1 = (bits[:num_values].astype(np.float64) + 1.0) * 2.0**-53  # (0, 1]: log is finite
    u2 = bits[num_values:].astype(np.float64) * 2.0**-53  # [0, 1)
    return np.sqrt(-2.0 * np.log(u1)) * np.cos(2.0 * np.pi * u2)


class SeededGaussianSampler:
    """INSECURE, reproducible noise from a user seed, for experiments only.

    Whoever knows the seed can subtract the noise: a release made with this sampler has NO privacy
    guarantee. It is recorded as insecure in the artifact. Successive calls on one instance
    continue one stream, so a run is reproducible from the seed.
    """

    name = "seeded-numpy"
    secure = False
    floating_point_safe = False

    def __init__(self, seed: int) -> None:
        self.seed = seed
        self._rng = seeded_rng(seed)

    def sample(self, num_values: int, *, noise_std: float) -> np.ndarray:
        """The next ``num_values`` draws of the seeded stream, scaled by the std."""
        return self._rng.normal(0.0, noise_std, size=num_values)

    def perturb(self, values: np.ndarray, *, noise_std: float) -> np.ndarray:
        """Values plus the next draws of the seeded stream."""
        noisy: np.ndarray = values + self.sample(values.size, noise_std=noise_std)
        return noisy

    def privacy_map_noise_std(self, **_: float) -> float | None:
        """No own privacy map."""
        return None

    def reserved_delta(self, *, delta: float) -> float:
        """Nothing: the continuous Gaussian's accounting applies as it is."""
        return 0.0

    def check_reserved_delta(self, *, noise_std: float, epsilon: float, reserved_delta: float) -> None:
        """Nothing to check."""

    def __repr__(self) -> str:
        return f"SeededGaussianSampler(seed={self.seed!r})  # INSECURE"


def make_sampler(
    name: str = "opendp", *, seed: int | None = None, allow_insecure_seed: bool = False
) -> NoiseSampler:
    """The sampler called ``name`` (``"opendp"`` or ``"csprng-numpy"``), or the insecure seeded one.

    Raises:
        DangerousModeError: a seed without ``allow_insecure_seed=True``.
        ParameterError: an unknown name (lists the valid ones).
    """
    if name not in SAMPLER_NAMES:
        raise ParameterError(f"unknown noise sampler {name!r}; valid names are {SAMPLER_NAMES}")
    if seed is not None:
        if not allow_insecure_seed:
            raise DangerousModeError(
                f"a noise seed ({seed!r}) makes the noise reproducible and removes the privacy "
                "guarantee; pass --insecure-seeded-noise (CLI) or allow_insecure_seed=True "
                "(Python) to run this insecure experiment"
            )
        return SeededGaussianSampler(seed)
    return OpenDPGaussianSampler() if name == "opendp" else CsprngNumpyGaussianSampler()


def discrete_gaussian_delta_log2(
    *, noise_std: float, epsilon: float, max_values_log2: int = MAX_VALUES_LOG2
) -> float:
    r"""``log2`` of the δ that OpenDP's discrete Gaussian adds to the continuous Gaussian's.

    Mechanism. For a float64 vector ``x`` of ``d <= 2^max_values_log2`` values, OpenDP
    (``make_gaussian``, ``k = -1074``) releases ``x + γ·Y`` rounded to float64, with grid
    ``γ = 2^-1074`` and ``Y_i`` i.i.d. discrete Gaussians ``N_Z(0, s²)``,
    ``P[Y_i = k] ∝ exp(−k²/(2s²))``, ``s = σ/γ``. Every float64 is a multiple of ``γ``, so
    ``x/γ`` is an integer vector: rounding onto the grid is exact and inflates no sensitivity
    (``Δ_grid = Δ``). The final rounding to float64 is post-processing.

    Coupling. Let ``M'(x) = x + γ·round(G)``, ``G ~ N(0, s² I)``: post-processing of the
    continuous Gaussian mechanism ``x + N(0, σ² I)`` (as ``x/γ`` is an integer,
    ``round(x/γ + G) = x/γ + round(G)``), so ``M'`` is (ε, δ_c)-DP wherever the continuous
    Gaussian of sensitivity Δ is (analytic Gaussian / PLD accountant, composed with any fixed
    events). If ``TV(M(x), M'(x)) <= η`` for every ``x``, then for every event ``E``:
    ``P[M(x)∈E] <= P[M'(x)∈E] + η <= e^ε P[M'(x')∈E] + δ_c + η <= e^ε P[M(x')∈E] + δ_c +
    (1 + e^ε)η``. So ``M`` is (ε, δ_c + (1 + e^ε)η)-DP; the same holds for the whole build,
    whose other parts are identical under ``M`` and ``M'``.

    Lemma: ``TV(N_Z(0, s²), round(N(0, s²))) <= 0.06/s²`` for ``s >= 1``. With
    ``f(t) = exp(−t²/(2s²))``, ``I = ∫f = s√(2π)`` and ``S = Σ_k f(k) = I·θ``, where Poisson
    summation gives ``θ = 1 + 2Σ_{n>=1} exp(−2π²s²n²) ∈ [1, 1 + 3e^{−2π²s²}]``:
    ``Σ_k |f(k)/S − f(k)/I| = |1 − θ| <= 3e^{−2π²s²}`` and, by the midpoint rule,
    ``|∫_{k−½}^{k+½} f − f(k)| <= max_cell |f''|/24`` with ``|f''(t)| = f(t)|t²/s² − 1|/s²``;
    summed over ``k`` this is at most ``(∫ g + TV(g))/(24 s²)`` for ``g = f·|t²/s² − 1|``,
    ``∫ g = I·E|Z² − 1| = 0.968 I`` and ``TV(g) <= 4``, so dividing by ``I`` gives
    ``<= (0.968 + 4/(s√(2π)))/(24 s²) <= 0.11/s²``. Both terms together: ``Σ|p − q| <= 0.12/s²``,
    ``TV <= 0.06/s²`` (``tests/privacy/test_discrete_gaussian.py`` checks it numerically for
    ``s`` from 1 to 30). Over ``d`` independent coordinates ``TV <= d·0.06/s²``; we use
    ``η = d/s²`` (a 16× margin).

    Returns:
        ``log2((1 + e^ε)·2^max_values_log2·γ²/σ²)``, computed in log space because the value
        is far below the smallest float64 (about ``2^-2000`` at σ = 1).

    Raises:
        ParameterError: a std or epsilon that is not finite and > 0.
    """
    noise_std = check_positive("noise_std", noise_std)
    epsilon = check_positive("epsilon", epsilon)
    log2_one_plus_exp = epsilon / math.log(2) + math.log2(1.0 + math.exp(-epsilon))  # log2(1 + e^ε)
    grid_units_log2 = math.log2(noise_std) - OPENDP_GRID_LOG2  # log2 s
    return log2_one_plus_exp + max_values_log2 - 2.0 * grid_units_log2


def opendp_noise_std(*, l2_sensitivity: float, epsilon: float, delta: float) -> float:
    """Smallest scale at which OpenDP's own map certifies (epsilon, delta) for ``d_in = Δ``.

    The measurement is ``make_fix_delta(make_zCDP_to_approxDP(make_gaussian(...)), delta)``;
    ``opendp.binary_search_param`` returns a scale on the passing side of the boundary, and the
    result is re-checked with the map before it is returned.

    Raises:
        ParameterError: a sensitivity not finite and > 0, or an invalid (epsilon, delta).
        NumericalError: OpenDP's map does not certify the scale found (should not happen).
    """
    d_in = check_positive("l2_sensitivity", l2_sensitivity)
    target = (check_positive("epsilon", epsilon), check_positive("delta", delta))
    if not target[1] < 1.0:
        raise ParameterError(f"delta must be in (0, 1), got {delta!r}")

    def make(scale: float) -> Measurement:
        return _opendp_approx_dp(scale, target[1])

    scale = float(dp.binary_search_param(make, d_in=d_in, d_out=target, T=float))
    if not make(scale).check(d_in, target):
        raise NumericalError(f"OpenDP's map does not certify scale {scale} for {target}")
    return scale


def _opendp_space() -> tuple[Domain, Metric]:
    dp.enable_features("contrib")
    # No fixed size: with the default k the discretisation is exact and the map size-free.
    return dp.vector_domain(dp.atom_domain(T=float, nan=False)), dp.l2_distance(T=float)


def _opendp_gaussian(noise_std: float) -> Measurement:
    return dp.m.make_gaussian(*_opendp_space(), scale=float(noise_std), k=OPENDP_GRID_LOG2)


def _opendp_approx_dp(scale: float, delta: float) -> Measurement:
    zcdp = _opendp_gaussian(scale)
    return dp.c.make_fix_delta(dp.c.make_zCDP_to_approxDP(zcdp), delta=delta)
