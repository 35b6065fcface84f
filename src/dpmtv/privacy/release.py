"""Plan and perform the one noisy release of the mean (docs/design.md §2).

:func:`plan_gaussian_release` fixes every number before any noise is drawn (so a ledger can be
charged first); :func:`add_gaussian_noise` consumes the :class:`UnnoisedMean` once and returns a
:class:`NoisedVector`. :func:`release_without_noise` is the explicitly opted-into non-private
baseline (ε = ∞).

The release seam, used by every caller that releases a mean (the build, the demo, the mechanism
audit, the benchmarks):

- :func:`release_clipped_sum`: clipped sums (a :class:`ClippedSumAccumulator`, e.g. the merged
  partial sums of distributed workers) + the public chunk count ``m`` → mean → noise once;
- :func:`release_clipped_mean`: per-chunk rows in memory → clip per layer → the step above.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

import dp_accounting
import numpy as np

from dpmtv.errors import DangerousModeError, NoiseAlreadyAddedError, NumericalError, ParameterError
from dpmtv.privacy._checks import check_positive
from dpmtv.privacy.aggregate import ClippedSumAccumulator, UnnoisedMean
from dpmtv.privacy.calibrate import (
    analytic_gaussian_noise_multiplier,
    calibrate_gaussian_noise_multiplier,
)
from dpmtv.privacy.clip import clip_l2_per_layer
from dpmtv.privacy.events import epsilon_of, event_to_json, gaussian_release_event
from dpmtv.privacy.noise import NoiseSampler, perturb_with_gaussian

__all__ = [
    "GaussianReleasePlan",
    "NoisedVector",
    "add_gaussian_noise",
    "calibrated_noise_std",
    "plan_gaussian_release",
    "release_clipped_mean",
    "release_clipped_sum",
    "release_without_noise",
]

NON_PRIVATE_SAMPLER = "none"


@dataclass(frozen=True)
class GaussianReleasePlan:
    """Every number of one release, fixed before noise is drawn.

    Attributes:
        l2_sensitivity: ``Δ`` under the build's relation (None only for the non-private baseline).
        noise_multiplier: ``σ_used / Δ``, the multiplier of the accounted Gaussian event.
        noise_std: ``σ_used``, the std actually drawn.
        noise_std_analytic: ``Δ·σ₁(ε, δ)`` of the analytic Gaussian (reference only).
        noise_std_sampler_map: the std the sampler's own privacy map would need (OpenDP's zCDP
            map; reference only, not used), else None.
        sampler: the sampler's name; ``sampler_secure`` whether it is secure.
        epsilon, delta: the target budget of the whole build.
        event: the accounted event (fixed events composed with the Gaussian release).
        epsilon_spent: the PLD accountant's epsilon for ``event`` at ``delta`` minus the
            sampler's reserved delta (<= epsilon).
    """

    l2_sensitivity: float | None
    noise_multiplier: float
    noise_std: float
    noise_std_analytic: float
    noise_std_sampler_map: float | None
    sampler: str
    sampler_secure: bool
    epsilon: float
    delta: float
    event: dp_accounting.DpEvent
    epsilon_spent: float

    def __post_init__(self) -> None:
        if self.epsilon_spent > self.epsilon:
            raise NumericalError(f"plan spends epsilon {self.epsilon_spent!r} > target {self.epsilon!r}")

    @property
    def noised(self) -> bool:
        """Whether Gaussian noise is drawn (False only for the non-private baseline)."""
        return math.isfinite(self.epsilon)

    @property
    def private(self) -> bool:
        """Whether the (epsilon, delta) guarantee holds: noised AND by a secure sampler. Seeded
        noise can be regenerated from its recorded seed and subtracted, which recovers the exact
        mean, so a seeded release carries NO guarantee even though it is noised."""
        return self.noised and self.sampler_secure

    def to_metadata(self) -> dict[str, Any]:
        """A JSON-ready dict of the plan, the event in dp-accounting's serialisable form."""
        data = {name: getattr(self, name) for name in self.__dataclass_fields__}
        data["event"] = event_to_json(self.event)
        data["private"] = self.private
        return data


@dataclass(frozen=True)
class NoisedVector:
    """The released per-layer vectors (read-only float64) and the plan they were released under.

    ``noised`` is True for a Gaussian release and False for the non-private baseline, whose plan
    has ``epsilon = inf``; ``private`` is the plan's (a seeded release is noised, not private).
    Either way it cannot be noised again: :func:`add_gaussian_noise` takes only an
    :class:`UnnoisedMean`.
    """

    layers: Mapping[int, np.ndarray]
    plan: GaussianReleasePlan
    noised: bool = field(default=True)

    @property
    def private(self) -> bool:
        """Whether the release carries its (epsilon, delta) guarantee (see the plan's)."""
        return self.plan.private


def plan_gaussian_release(
    *,
    l2_sensitivity: float,
    epsilon: float,
    delta: float,
    sampler: NoiseSampler,
    fixed_events: Sequence[dp_accounting.DpEvent] = (),
) -> GaussianReleasePlan:
    """Choose the noise std for a release of sensitivity ``Δ`` within (epsilon, delta).

    ``σ = Δ · calibrate_gaussian_noise_multiplier(ε, δ, fixed_events, reserved_delta=r)``: the
    PLD accountant over the whole build at ``δ − r``, where ``r = sampler.reserved_delta(δ)`` is
    what the sampler keeps for its own deviation from the continuous Gaussian (OpenDP's discrete
    Gaussian: ``δ·2^-40``, :func:`dpmtv.privacy.noise.discrete_gaussian_delta_log2`; 0 for the
    continuous samplers), checked to cover it at this σ. The accounted event is the Gaussian with
    multiplier ``σ / Δ`` (composed with ``fixed_events``); ``epsilon_spent`` is the accountant's
    epsilon for it at ``δ − r`` (<= the target). For reference only: ``σ_analytic = Δ·σ₁(ε, δ)``
    (Balle & Wang; without fixed events σ is within ~1e-6 relative of it and never below it) and
    ``σ_map``, the std the sampler's own privacy map would need (OpenDP's zCDP map).
    """
    delta_l2 = check_positive("l2_sensitivity", l2_sensitivity)
    multiplier, noise_std, reserved = _calibrate(delta_l2, epsilon, delta, sampler, fixed_events)
    sampler_map = sampler.privacy_map_noise_std(
        l2_sensitivity=delta_l2, epsilon=float(epsilon), delta=float(delta)
    )
    event = _compose(fixed_events, gaussian_release_event(noise_multiplier=multiplier))
    return GaussianReleasePlan(
        l2_sensitivity=delta_l2,
        noise_multiplier=multiplier,
        noise_std=noise_std,
        noise_std_analytic=delta_l2 * analytic_gaussian_noise_multiplier(epsilon=epsilon, delta=delta),
        noise_std_sampler_map=sampler_map,
        sampler=sampler.name,
        sampler_secure=bool(sampler.secure),
        epsilon=float(epsilon),
        delta=float(delta),
        event=event,
        epsilon_spent=epsilon_of(event, delta=float(delta) - reserved),
    )


def calibrated_noise_std(
    *,
    l2_sensitivity: float,
    epsilon: float,
    delta: float,
    sampler: NoiseSampler,
    fixed_events: Sequence[dp_accounting.DpEvent] = (),
) -> float:
    """The noise std :func:`plan_gaussian_release` draws for these numbers (and nothing else of
    the plan): what a loaded artifact's ``noise_std`` must equal."""
    delta_l2 = check_positive("l2_sensitivity", l2_sensitivity)
    return _calibrate(delta_l2, epsilon, delta, sampler, fixed_events)[1]


def _calibrate(
    delta_l2: float,
    epsilon: float,
    delta: float,
    sampler: NoiseSampler,
    fixed_events: Sequence[dp_accounting.DpEvent],
) -> tuple[float, float, float]:
    """(multiplier, noise std, reserved delta): the one computation of the release's σ."""
    reserved = sampler.reserved_delta(delta=float(delta))
    multiplier = calibrate_gaussian_noise_multiplier(
        epsilon=epsilon, delta=delta, fixed_events=fixed_events, reserved_delta=reserved
    )
    noise_std = _std_at_least(multiplier, delta_l2)
    sampler.check_reserved_delta(noise_std=noise_std, epsilon=float(epsilon), reserved_delta=reserved)
    return multiplier, noise_std, reserved


def add_gaussian_noise(
    mean: UnnoisedMean, *, plan: GaussianReleasePlan, sampler: NoiseSampler
) -> NoisedVector:
    """Consume ``mean`` and add ONE draw of ``N(0, σ_used² I)`` over all layers concatenated.

    Raises:
        NoiseAlreadyAddedError: ``mean`` was already released, or is already a NoisedVector.
        ParameterError: the sampler is not the planned one, or the plan is non-private.
    """
    _check_unnoised(mean)
    if not plan.noised or plan.noise_std <= 0:
        raise ParameterError("a non-private plan cannot be used for a noisy release")
    if sampler.name != plan.sampler:
        raise ParameterError(f"the plan is for sampler {plan.sampler!r}, got {sampler.name!r}")
    values = mean._consume()  # the only read of the un-noised values
    layers = sorted(values)
    flat = np.concatenate([values[layer] for layer in layers])  # (Σ D_l,)
    flat = perturb_with_gaussian(flat, noise_std=plan.noise_std, sampler=sampler)
    return NoisedVector(layers=_split(flat, values, layers), plan=plan, noised=True)


def release_without_noise(
    mean: UnnoisedMean, *, allow_non_private: bool = False, l2_sensitivity: float | None = None
) -> NoisedVector:
    """The NON-PRIVATE baseline (ε = ∞): release the mean as is, labelled non-private.

    Raises:
        DangerousModeError: without ``allow_non_private=True`` (CLI: ``--non-private``).
        NoiseAlreadyAddedError: ``mean`` was already released.
    """
    if allow_non_private is not True:
        raise DangerousModeError(
            "releasing the mean without noise has no privacy guarantee (epsilon = inf); pass "
            "--non-private (CLI) or allow_non_private=True (Python) for this baseline"
        )
    _check_unnoised(mean)
    values = mean._consume()
    layers = sorted(values)
    flat = np.concatenate([values[layer] for layer in layers])  # (Σ D_l,)
    plan = _non_private_plan(l2_sensitivity)
    return NoisedVector(layers=_split(flat, values, layers), plan=plan, noised=False)


def release_clipped_sum(
    clipped_sums: ClippedSumAccumulator,
    *,
    num_chunks: int,
    plan: GaussianReleasePlan | None,
    sampler: NoiseSampler | None = None,
    before_noise: Callable[[], None] | None = None,
    allow_non_private: bool = False,
    l2_sensitivity: float | None = None,
) -> NoisedVector:
    """Release the mean of the clipped chunk vectors summed in ``clipped_sums``: divide by the
    PUBLIC chunk count ``m`` (:meth:`ClippedSumAccumulator.mean`), call ``before_noise()`` (a
    ledger charge; if it raises, nothing is drawn), then noise once with ``plan``.

    ``plan=None`` is the non-private baseline (ε = ∞), which needs ``allow_non_private=True``
    and records ``l2_sensitivity`` in its plan (:func:`release_without_noise`). The sums may come
    from one process or be the :meth:`~ClippedSumAccumulator.merge` of workers' partial sums:
    either way the noise is added here, once.
    """
    if plan is not None and sampler is None:  # refused before the charge: nothing is spent
        raise ParameterError(f"a noisy release needs the sampler {plan.sampler!r} its plan was made for")
    mean = clipped_sums.mean(num_chunks=num_chunks)
    if before_noise is not None:
        before_noise()
    if plan is None:
        return release_without_noise(mean, allow_non_private=allow_non_private, l2_sensitivity=l2_sensitivity)
    assert sampler is not None  # checked above, before the charge
    return add_gaussian_noise(mean, plan=plan, sampler=sampler)


def release_clipped_mean(
    rows: Mapping[int, np.ndarray],
    *,
    l2_clip_norms: Mapping[int, float],
    num_chunks: int,
    plan: GaussianReleasePlan,
    sampler: NoiseSampler,
) -> NoisedVector:
    """One release from per-chunk rows held in memory, ``{layer: (B, D_l)}`` with ``B <= m``:
    clip each row per layer to ``C_l``, sum, divide by the public ``m``, noise once — the build's
    release (:func:`release_clipped_sum`) for experiments that extract all chunks first."""
    clipped = clip_l2_per_layer(rows, l2_clip_norms=l2_clip_norms)
    return release_clipped_sum(
        ClippedSumAccumulator.of(clipped), num_chunks=num_chunks, plan=plan, sampler=sampler
    )


def _non_private_plan(l2_sensitivity: float | None) -> GaussianReleasePlan:
    return GaussianReleasePlan(
        l2_sensitivity=l2_sensitivity,
        noise_multiplier=0.0,
        noise_std=0.0,
        noise_std_analytic=0.0,
        noise_std_sampler_map=None,
        sampler=NON_PRIVATE_SAMPLER,
        sampler_secure=False,
        epsilon=math.inf,
        delta=0.0,
        event=dp_accounting.NonPrivateDpEvent(),
        epsilon_spent=math.inf,
    )


def _check_unnoised(mean: object) -> None:
    if isinstance(mean, NoisedVector):
        raise NoiseAlreadyAddedError("this vector is already released; it cannot be noised again")
    if not isinstance(mean, UnnoisedMean):
        raise TypeError(f"expected an UnnoisedMean, got {type(mean).__name__}")


def _split(flat: np.ndarray, values: Mapping[int, np.ndarray], layers: list[int]) -> Mapping[int, np.ndarray]:
    out, start = {}, 0
    for layer in layers:
        stop = start + values[layer].shape[0]
        out[layer] = flat[start:stop].copy()
        out[layer].flags.writeable = False
        start = stop
    return MappingProxyType(out)


def _std_at_least(multiplier: float, delta_l2: float) -> float:
    """``multiplier · Δ``, nudged up an ulp at a time until ``std / Δ >= multiplier``."""
    std = multiplier * delta_l2
    while std / delta_l2 < multiplier:
        std = float(np.nextafter(std, math.inf))
    return std


def _compose(fixed: Sequence[dp_accounting.DpEvent], release: dp_accounting.DpEvent) -> dp_accounting.DpEvent:
    return dp_accounting.ComposedDpEvent([*fixed, release]) if fixed else release
