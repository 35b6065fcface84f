r"""Run the release many times on neighbouring datasets and bound its privacy loss from below.

What is audited
===============
The release as implemented by :mod:`dpmtv.privacy`: per-chunk vectors → ``release_clipped_mean``
(clip per layer → ``ClippedSumAccumulator`` → ``mean(num_chunks=m)`` → noise once, the build's
``release_clipped_sum``) with the plan of ``plan_gaussian_release`` (σ calibrated by the PLD
accountant for ``Δ = l2_sensitivity(...)``).
Every trial goes through those library functions; only the noise sampler is chosen for speed
(``csprng-numpy``: the analytic calibration applies to it; ``seed`` switches to the seeded
sampler for reproducible test runs — an audit is not a release).

A :class:`Mechanism` can be deliberately broken, to check that the audit notices: ``small-noise``
draws ``noise_std_factor · σ`` (a calibration bug), ``no-clip`` skips clipping (a sensitivity
bug). The claimed ε stays the one the correct plan certifies.

Neighbouring datasets and the canary
====================================
``D'`` holds one *canary* record where ``D`` holds an ordinary one (replace-one). The canary is
designed to move its chunk's clipped vector as far as clipping allows: to the antipode of the
vector that chunk has without it, ``‖â' − â‖ = 2·C_l`` in every layer, so the change of the mean
is exactly ``Δ``, the sensitivity the noise is calibrated to. With Gaussian noise the optimal
test for that shift is the projection onto the shift direction, so the statistic here is
``S = ⟨release, v⟩`` with ``v`` the unit vector along ``E[M(D')] − E[M(D)]`` (a white-box
auditor knows both datasets). For a correct mechanism the privacy loss of this pair is then
exactly the calibrated Gaussian's: ``ε_lower → ε_claimed`` as the number of trials grows.
``epsilon_canary`` reports the analytic ε of the measured shift (Balle–Wang), i.e. what an
auditor with infinitely many trials would reach with this canary; it equals ``ε_claimed`` when the
canary is worst-case and exceeds it when the mechanism is broken.

*Synthetic* (:func:`audit_synthetic`, no model): ``N = m·s`` records with a feature per layer;
a chunk's vector is the mean of its records' features (a stand-in for the model). Ordinary
records have feature ``2·C_l·u_l`` (every chunk clips to ``C_l·u_l``); the canary has
``−CANARY_SCALE·s·C_l·u_l``, far beyond any clip norm: it pulls its chunk's mean to a large
multiple of ``−u_l``, which clips to ``−C_l·u_l`` — the antipode — and which a mechanism that
fails to clip releases almost unchanged. The partition is redrawn in every trial
(``partition_replace_one``), as in a build.

*Fixed chunk vectors* (:func:`audit_chunk_vectors`, used with a model): the forward passes run
once; the trials repeat the clip → mean → noise. The partition is held fixed: the guarantee is
proven for every fixed partition (no amplification by shuffling is claimed), so auditing
conditionally on the partition where the canary moves its chunk most is the strongest test;
redrawing it would only mix the canary's effect over chunks.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import dp_accounting
import numpy as np

from dpmtv.audit.stats import EpsilonLowerBound, epsilon_lower_bound
from dpmtv.errors import ParameterError
from dpmtv.privacy import (
    ClippedSumAccumulator,
    CsprngNumpyGaussianSampler,
    NoiseSampler,
    SeededGaussianSampler,
    clip_l2_per_layer,
    l2_sensitivity,
    partition_replace_one,
    plan_gaussian_release,
    release_clipped_mean,
    release_clipped_sum,
    secure_rng,
    seeded_rng,
)
from dpmtv.privacy.release import GaussianReleasePlan

__all__ = [
    "MECHANISMS",
    "AuditPoint",
    "Mechanism",
    "audit_chunk_vectors",
    "audit_synthetic",
]

Rows = Mapping[int, np.ndarray]  # layer -> (m, D_l) chunk vectors
CANARY_SCALE = 100.0  # the synthetic canary's feature norm, in units of s·C_l
_NOISE_SEED_OFFSET = 2**32


@dataclass(frozen=True)
class Mechanism:
    """The release variant under audit: ``correct``, or deliberately broken."""

    name: str = "correct"
    clip: bool = True
    noise_std_factor: float = 1.0


MECHANISMS = {
    "correct": Mechanism(),
    "small-noise": Mechanism("small-noise", noise_std_factor=0.25),
    "no-clip": Mechanism("no-clip", clip=False),
}


@dataclass(frozen=True)
class AuditPoint:
    """The audit at one claimed ε: the confident lower bound and the numbers behind it."""

    epsilon_claimed: float
    delta: float
    mechanism: str
    trials: int  # releases per dataset (D and D' each)
    l2_sensitivity: float
    noise_std: float  # σ actually drawn
    shift_norm: float  # ‖E[M(D')] − E[M(D)]‖₂; equals Δ for a worst-case canary
    epsilon_canary: float  # analytic ε of that shift at σ (the infinite-trial limit)
    bound: EpsilonLowerBound

    @property
    def epsilon_lower(self) -> float:
        return self.bound.epsilon_lower

    @property
    def violation(self) -> bool:
        """True when the audit shows, at its confidence, more loss than claimed."""
        return self.bound.epsilon_lower > self.epsilon_claimed

    def to_json(self) -> dict[str, Any]:
        data = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name != "bound"}
        return {
            **data,
            "epsilon_lower": self.epsilon_lower,
            "violation": self.violation,
            **self.bound.to_json(),
        }


def audit_chunk_vectors(
    rows_without: Rows,
    rows_with: Rows,
    *,
    l2_clip_norms: Mapping[int, float],
    epsilon: float,
    delta: float,
    trials: int,
    mechanism: Mechanism = MECHANISMS["correct"],
    confidence: float = 0.95,
    seed: int | None = None,
) -> AuditPoint:
    """Audit the release of fixed per-chunk vectors (UNclipped, ``(m, D_l)`` per layer) of ``D``
    and ``D'``; they must have the same chunks and shapes. See the module docstring.

    Raises:
        ParameterError: mismatched layers or shapes, fewer than 20 trials, or datasets whose
            releases have the same expectation (nothing to distinguish).
    """
    num_chunks = _check_rows(rows_without, rows_with)
    if set(l2_clip_norms) != set(rows_without):
        raise ParameterError(
            f"l2_clip_norms names layers {sorted(l2_clip_norms)}, the chunk vectors {sorted(rows_without)}"
        )
    return _audit(
        lambda with_canary, rng: rows_with if with_canary else rows_without,
        num_chunks=num_chunks,
        l2_clip_norms=l2_clip_norms,
        epsilon=epsilon,
        delta=delta,
        trials=trials,
        mechanism=mechanism,
        confidence=confidence,
        seed=seed,
    )


def audit_synthetic(
    *,
    epsilon: float,
    delta: float,
    trials: int,
    num_chunks: int = 16,
    shots_per_chunk: int = 4,
    layer_dims: Mapping[int, int] | None = None,
    l2_clip_norm: float = 1.0,
    mechanism: Mechanism = MECHANISMS["correct"],
    confidence: float = 0.95,
    seed: int | None = None,
) -> AuditPoint:
    """Audit the release on synthetic records with the antipodal canary (module docstring); the
    partition is redrawn with ``partition_replace_one`` in every trial. No model needed."""
    dims = dict(layer_dims or {0: 32, 1: 32})
    features = _synthetic_features(dims, num_chunks * shots_per_chunk, shots_per_chunk, l2_clip_norm)

    def rows(with_canary: bool, rng: np.random.Generator) -> Rows:
        partition = partition_replace_one(
            num_chunks * shots_per_chunk, shots_per_chunk=shots_per_chunk, rng=rng
        )
        chunks = np.stack(partition.chunks)  # (m, s) record indices
        return {layer: f[with_canary][chunks].mean(axis=1) for layer, f in features.items()}  # (m, D_l)

    return _audit(
        rows,
        num_chunks=num_chunks,
        l2_clip_norms=dict.fromkeys(dims, float(l2_clip_norm)),
        epsilon=epsilon,
        delta=delta,
        trials=trials,
        mechanism=mechanism,
        confidence=confidence,
        seed=seed,
    )


def _audit(
    rows: Callable[[bool, np.random.Generator], Rows],
    *,
    num_chunks: int,
    l2_clip_norms: Mapping[int, float],
    epsilon: float,
    delta: float,
    trials: int,
    mechanism: Mechanism,
    confidence: float,
    seed: int | None,
) -> AuditPoint:
    if isinstance(trials, bool) or not isinstance(trials, int) or trials < 20:
        raise ParameterError(f"trials must be an integer >= 20, got {trials!r}")
    rng = seeded_rng(seed) if seed is not None else secure_rng()
    # A different seed for the noise stream, so partition and noise draws are not the same bits.
    sampler: NoiseSampler = (
        SeededGaussianSampler(seed + _NOISE_SEED_OFFSET) if seed is not None else CsprngNumpyGaussianSampler()
    )
    layers = sorted(l2_clip_norms)
    sensitivity = l2_sensitivity(
        l2_clip_norms=[l2_clip_norms[layer] for layer in layers],
        num_chunks=num_chunks,
        relation="replace-one",
    )
    plan = _plan(sensitivity, epsilon=epsilon, delta=delta, sampler=sampler, mechanism=mechanism)
    shift = _expected(rows(True, rng), l2_clip_norms, num_chunks, mechanism) - _expected(
        rows(False, rng), l2_clip_norms, num_chunks, mechanism
    )
    shift_norm = float(np.linalg.norm(shift))
    if not shift_norm > 0:
        raise ParameterError("the canary does not change the release's expectation; nothing to audit")
    direction = shift / shift_norm

    def scores(with_canary: bool) -> np.ndarray:
        return np.array(
            [
                _release(rows(with_canary, rng), l2_clip_norms, num_chunks, plan, sampler, mechanism)
                @ direction
                for _ in range(trials)
            ]
        )

    without, with_ = scores(False), scores(True)
    return AuditPoint(
        epsilon_claimed=float(epsilon),
        delta=float(delta),
        mechanism=mechanism.name,
        trials=trials,
        l2_sensitivity=sensitivity,
        noise_std=plan.noise_std,
        shift_norm=shift_norm,
        epsilon_canary=float(dp_accounting.get_epsilon_gaussian(plan.noise_std / shift_norm, float(delta))),
        bound=epsilon_lower_bound(without, with_, delta=delta, confidence=confidence),
    )


def _plan(
    sensitivity: float, *, epsilon: float, delta: float, sampler: NoiseSampler, mechanism: Mechanism
) -> GaussianReleasePlan:
    """The correct plan for the claimed (ε, δ); a ``small-noise`` mechanism scales its σ down."""
    plan = plan_gaussian_release(l2_sensitivity=sensitivity, epsilon=epsilon, delta=delta, sampler=sampler)
    if mechanism.noise_std_factor == 1.0:
        return plan
    return dataclasses.replace(plan, noise_std=plan.noise_std * mechanism.noise_std_factor)


def _release(
    rows: Rows,
    l2_clip_norms: Mapping[int, float],
    num_chunks: int,
    plan: GaussianReleasePlan,
    sampler: NoiseSampler,
    mechanism: Mechanism,
) -> np.ndarray:
    """One release through the library: clip → accumulate → mean(m) → noise once; flat (Σ D_l,)."""
    if mechanism.clip:
        noised = release_clipped_mean(
            rows, l2_clip_norms=l2_clip_norms, num_chunks=num_chunks, plan=plan, sampler=sampler
        )
    else:  # the deliberately broken mechanism: the same release of unclipped sums
        sums = ClippedSumAccumulator.of(rows)
        noised = release_clipped_sum(sums, num_chunks=num_chunks, plan=plan, sampler=sampler)
    return np.concatenate([noised.layers[layer] for layer in sorted(noised.layers)])


def _expected(
    rows: Rows, l2_clip_norms: Mapping[int, float], num_chunks: int, mechanism: Mechanism
) -> np.ndarray:
    """The noise-free release (the audit's own knowledge of D, D'); flat (Σ D_l,)."""
    clipped = clip_l2_per_layer(rows, l2_clip_norms=l2_clip_norms) if mechanism.clip else rows
    return np.concatenate([np.asarray(clipped[layer]).sum(axis=0) / num_chunks for layer in sorted(clipped)])


def _synthetic_features(
    dims: Mapping[int, int], num_records: int, shots_per_chunk: int, clip_norm: float
) -> dict[int, dict[bool, np.ndarray]]:
    """layer -> {False: D's features, True: D''s features}, each (N, D_l); the canary is the last
    record of D'. ``u_l`` is a fixed (public) unit direction per layer."""
    design = np.random.default_rng(0)
    features = {}
    for layer, dim in dims.items():
        u = design.normal(size=dim)
        u /= np.linalg.norm(u)
        ordinary = np.tile(2.0 * clip_norm * u, (num_records, 1))  # (N, D_l)
        canary = ordinary.copy()
        canary[-1] = -CANARY_SCALE * shots_per_chunk * clip_norm * u
        features[layer] = {False: ordinary, True: canary}
    return features


def _check_rows(rows_without: Rows, rows_with: Rows) -> int:
    if set(rows_without) != set(rows_with) or not rows_without:
        raise ParameterError(f"D and D' have different layers: {sorted(rows_without)} vs {sorted(rows_with)}")
    shapes = {np.shape(rows_without[layer]) for layer in rows_without}
    for layer in rows_without:
        a, b = np.shape(rows_without[layer]), np.shape(rows_with[layer])
        if a != b or len(a) != 2:
            raise ParameterError(f"layer {layer}: D has chunk rows of shape {a}, D' of shape {b}")
    chunks = {shape[0] for shape in shapes}
    if len(chunks) != 1:
        raise ParameterError(f"every layer needs the same number of chunks, got {sorted(chunks)}")
    return chunks.pop()
