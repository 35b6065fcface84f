"""Is a loaded artifact's privacy claim consistent? Everything derivable is re-derived from the
artifact's own public numbers, through the one function that computes it at build time:

* the relation, the unit and the counts they make public: user level only with add-remove-one;
  ``num_records`` recorded exactly under replace-one, and then ``m = floor(N/s)`` (halved for
  parallel selection);
* ``Δ`` from the clip norms, ``m`` and the relation (:func:`dpmtv.privacy.sensitivity.l2_sensitivity`),
  over the released layers' norms, or with private selection over the recorded worst-case norms
  (:func:`~dpmtv.privacy.sensitivity.worst_case_clip_norms`), which must dominate the released ones;
* the accounted events: the Gaussian of ``σ/Δ``, composed with the private selection's event
  re-planned from ``head_selection`` (:func:`dpmtv.privacy.noisy_top_k.plan_private_selection`)
  and a private clip norm's round re-derived from ``privacy.clip_norm_selection``
  (:func:`dpmtv.privacy.clip_quantile.clip_multiplier_event`; its multiplier on its grid and the
  released norms its multiple of the recorded public scales), or alone;
* ``σ`` from the calibration of that event (:func:`dpmtv.privacy.release.calibrated_noise_std`),
  the reference numbers ``σ_analytic`` and the sampler map's ``σ``, and ``epsilon_spent`` from the
  PLD accountant (dp-accounting);
* ``private`` and ``secure_noise`` from the recorded sampler.

This is a consistency check, not a signature: it refuses every claim that contradicts its own
numbers, but whoever rewrites a claim AND every number derived from it (a seeded vector
relabelled OpenDP with the sampler map recomputed, a replace-one build relabelled add-remove-one
with ``num_records`` dropped) forges a claim no check of the file alone can tell from a real one.
Only a signature by a trusted key (:mod:`dpmtv.artifact.signature`) covers that; docs/design.md §5.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, NoReturn, cast

import dp_accounting

from dpmtv.candidate_lists import CANDIDATE_LISTS, candidate_head_sets
from dpmtv.errors import ArtifactIntegrityError, DpmtvError
from dpmtv.heads import HeadSet
from dpmtv.privacy.calibrate import analytic_gaussian_noise_multiplier
from dpmtv.privacy.clip_quantile import CLIP_UTILITIES, clip_multiplier_event, clip_norm_candidates
from dpmtv.privacy.events import epsilon_of, event_from_json, event_to_json
from dpmtv.privacy.noise import (
    CsprngNumpyGaussianSampler,
    NoiseSampler,
    OpenDPGaussianSampler,
    SeededGaussianSampler,
)
from dpmtv.privacy.noisy_top_k import monotone_scores, plan_private_selection
from dpmtv.privacy.release import NON_PRIVATE_SAMPLER, calibrated_noise_std
from dpmtv.privacy.sensitivity import l2_sensitivity

if TYPE_CHECKING:
    from dpmtv.artifact.metadata import PrivacyMetadata

# The calibration searches to 1e-7 relative; a recorded σ further than this from it was edited.
NOISE_STD_RELATIVE_TOLERANCE = 1e-6
# Numbers recomputed by the same deterministic code as at build time (Δ, σ_analytic, the
# sampler map, the accountant's ε): equal up to rounding of the JSON round trip.
DERIVED_RELATIVE_TOLERANCE = 1e-9
PRIVATE_SELECTION_METHOD = "private-noisy-top-k"
# one exponential-mechanism choice among public candidate head sets (dpmtv.selection.candidates)
PRIVATE_CANDIDATES_METHOD = "private-candidate-choice"


def check_privacy_claim(
    privacy: PrivacyMetadata,
    *,
    head_selection: dict[str, Any],
    where: str,
    heads: list[list[int]] | None = None,
) -> None:
    """Raise ArtifactIntegrityError naming the first field of ``privacy`` (a
    :class:`dpmtv.artifact.metadata.PrivacyMetadata`) that contradicts the others or ``head_selection``
    (and, given the released ``heads`` as JSON pairs, a candidate choice that did not pick them)."""
    claim = _Claim(privacy, head_selection, where)
    claim.no_nan()
    claim.chosen_candidate(heads)
    claim.relation_and_counts()
    claim.sensitivity()
    if privacy.noise_std == 0:
        claim.without_noise()
    else:
        claim.noised()


class _Claim:
    def __init__(self, privacy: PrivacyMetadata, head_selection: dict[str, Any], where: str) -> None:
        self.p, self.where = privacy, where
        self.selection = head_selection.get("details") if _is_private(head_selection) else None
        self.candidates = head_selection.get("method") == PRIVATE_CANDIDATES_METHOD

    def chosen_candidate(self, heads: list[list[int]] | None) -> None:
        """A candidate choice released one of its recorded candidates, the chosen one, and those
        are the public list of the recorded kind over the recorded pool (re-derived here)."""
        if not self.candidates:
            return
        d = self.selection or {}
        candidates, chosen = d.get("candidates"), d.get("chosen")
        if (
            not isinstance(candidates, list)
            or not candidates
            or not isinstance(chosen, int)
            or not 0 <= chosen < len(candidates)
            or (heads is not None and [list(p) for p in heads] != candidates[chosen])
        ):
            self.refuse("accounting_events", "rests on a candidate choice that did not choose the heads")
        if candidates != self.public_candidates(d.get("candidate_list"), d.get("pool")):
            self.refuse(
                "accounting_events",
                "rests on a candidate list that is not the public list of its recorded kind "
                "(head_selection.details.candidate_list) over its recorded pool (details.pool)",
            )

    def public_candidates(self, kind: Any, pool: Any) -> list[list[list[int]]] | None:
        if kind not in CANDIDATE_LISTS or not isinstance(pool, list):
            return None
        try:
            return [c.to_json() for c in candidate_head_sets(kind, HeadSet.of(map(tuple, pool)))]
        except (DpmtvError, TypeError, ValueError):
            return None

    def max_selected_layers(self) -> Any:
        """How many layers a private selection's heads may occupy: k for the votes' top-k, the
        largest recorded candidate's layers for a candidate choice."""
        d = self.selection or {}
        if not self.candidates:
            return d.get("k")
        try:
            return max(len({int(pair[0]) for pair in c}) for c in d["candidates"])
        except (KeyError, TypeError, ValueError, IndexError):
            return None

    def refuse(self, field: str, why: str) -> NoReturn:
        raise ArtifactIntegrityError(
            f"{self.where}: privacy.{field} = {getattr(self.p, field)!r} {why}; the metadata has been "
            "edited or is corrupt, so its guarantee cannot be trusted (rebuild the vector)"
        )

    def no_nan(self) -> None:
        for field in ("epsilon", "delta", "epsilon_spent", "l2_sensitivity", "noise_std", "noise_multiplier"):
            value = getattr(self.p, field)
            if math.isnan(value) or value < 0:
                self.refuse(field, "is NaN or negative")
        for field in ("l2_clip_norm", "sensitivity_l2_clip_norm"):
            norms = getattr(self.p, field)
            if not norms or not all(math.isfinite(c) and c > 0 for c in norms):
                self.refuse(field, "must hold norms that are finite and > 0")
        if self.p.num_chunks < 1 or self.p.shots_per_chunk < 1:
            self.refuse("num_chunks", f"and shots_per_chunk = {self.p.shots_per_chunk!r} must be >= 1")

    def relation_and_counts(self) -> None:
        """Only the unit/relation pairs a build produces, with exactly the counts they make public."""
        p = self.p
        if p.neighbouring_relation not in ("replace-one", "add-remove-one"):
            self.refuse("neighbouring_relation", "is not 'replace-one' or 'add-remove-one'")
        if p.privacy_unit not in ("record", "user"):
            self.refuse("privacy_unit", "is not 'record' or 'user'")
        if p.privacy_unit == "user" and p.neighbouring_relation != "add-remove-one":
            self.refuse(
                "privacy_unit", f"with {p.neighbouring_relation!r}: user level is add/remove one user"
            )
        if p.neighbouring_relation == "add-remove-one":
            for field in ("num_records", "num_unused_records"):
                if getattr(p, field) is not None:
                    self.refuse(field, "is recorded under add-remove-one, where N is private")
            return
        if p.num_records is None or p.num_unused_records is None:
            self.refuse("num_records", "is missing under replace-one, where N is public")
        total = p.num_records // p.shots_per_chunk  # replace-one: m = floor(N/s)
        parallel = self.selection is not None and self.selection.get("composition") == "parallel"
        expected = total // 2 if parallel else total  # the release half: odd chunks
        if p.num_chunks != expected:
            self.refuse("num_chunks", f"is not floor(N/s) = {expected} for num_records = {p.num_records}")

    def sensitivity(self) -> None:
        """Δ = 2·sqrt(Σ C²)/m over the norms it rests on, and those norms cover the released ones."""
        p = self.p
        released = sorted(p.l2_clip_norm, reverse=True)
        if self.selection is None:
            self.same_sensitivity(p.l2_clip_norm)
            if list(p.sensitivity_l2_clip_norm) != list(p.l2_clip_norm):
                self.refuse(
                    "sensitivity_l2_clip_norm",
                    "differs from privacy.l2_clip_norm (heads not selected privately)",
                )
            return
        worst = sorted(p.sensitivity_l2_clip_norm, reverse=True)
        k = self.max_selected_layers()
        if not isinstance(k, int) or len(worst) > k or len(worst) < len(released):
            self.refuse("sensitivity_l2_clip_norm", f"cannot be the worst case of k = {k!r} selected heads")
        if any(w < r for w, r in zip(worst, released, strict=False)):
            self.refuse(
                "sensitivity_l2_clip_norm", "does not cover the released layers' privacy.l2_clip_norm"
            )
        self.same_sensitivity(p.sensitivity_l2_clip_norm)

    def same_sensitivity(self, norms: Sequence[float]) -> None:
        p = self.p
        try:
            expected = l2_sensitivity(
                l2_clip_norms=norms, num_chunks=p.num_chunks, relation=p.neighbouring_relation
            )
        except DpmtvError as exc:
            self.refuse("l2_sensitivity", f"cannot be derived ({exc})")
        if not math.isclose(p.l2_sensitivity, expected, rel_tol=DERIVED_RELATIVE_TOLERANCE):
            self.refuse(
                "l2_sensitivity",
                f"is not 2·sqrt(Σ C²)/m = {expected!r} for clip norms {list(norms)}, "
                f"privacy.num_chunks = {p.num_chunks} and {p.neighbouring_relation}",
            )

    def without_noise(self) -> None:
        p = self.p
        if p.private:
            self.refuse("noise_std", "(no noise) next to privacy.private = True")
        if not math.isinf(p.epsilon) or p.noise_sampler != NON_PRIVATE_SAMPLER:
            self.refuse("epsilon", "is claimed for a release without noise (it must be inf, sampler 'none')")
        if self.event() != dp_accounting.NonPrivateDpEvent():
            self.refuse("accounting_events", "is not the non-private event of a release without noise")

    def noised(self) -> None:
        p = self.p
        if not (math.isfinite(p.epsilon) and p.epsilon > 0):
            self.refuse("epsilon", "must be finite and > 0")
        if not 0.0 < p.delta < 1.0:
            self.refuse("delta", "must be in (0, 1)")
        for field in ("l2_sensitivity", "noise_std"):
            if not math.isfinite(getattr(p, field)) or getattr(p, field) <= 0:
                self.refuse(field, "must be finite and > 0")
        sampler = self.sampler()
        if p.private != bool(sampler.secure) or p.secure_noise != bool(sampler.secure):
            secure = "secure" if sampler.secure else "seeded, NOT secure"
            self.refuse("private", f"(secure_noise = {p.secure_noise!r}) but sampler {sampler!r} is {secure}")
        fixed = self.fixed_events()
        self.calibrated(sampler, fixed)
        self.reference_numbers(sampler)
        self.spent(sampler)

    def sampler(self) -> NoiseSampler:
        p = self.p
        if p.noise_sampler == "seeded-numpy":
            if p.insecure_seed is None:
                self.refuse("insecure_seed", "is missing for seeded noise")
            return SeededGaussianSampler(p.insecure_seed)
        if p.insecure_seed is not None:
            self.refuse("insecure_seed", f"is recorded for the unseeded sampler {p.noise_sampler!r}")
        samplers: dict[str, Callable[[], NoiseSampler]] = {
            "opendp": OpenDPGaussianSampler,
            "csprng-numpy": CsprngNumpyGaussianSampler,
        }
        if p.noise_sampler not in samplers:
            self.refuse("noise_sampler", f"is not one of {sorted(samplers)} or 'seeded-numpy'")
        return samplers[p.noise_sampler]()

    def event(self) -> dp_accounting.DpEvent:
        try:
            return event_from_json(self.p.accounting_events)
        except DpmtvError as exc:
            self.refuse("accounting_events", f"is not a dpmtv event ({exc})")

    def fixed_events(self) -> list[dp_accounting.DpEvent]:
        """The accounted event is the Gaussian release, alone or after the private selection's
        event (sequential composition), which is re-planned from the recorded selection."""
        event = self.event()
        events = list(event.events) if isinstance(event, dp_accounting.ComposedDpEvent) else [event]
        release = events[-1]
        if not isinstance(release, dp_accounting.GaussianDpEvent) or not math.isclose(
            release.noise_multiplier, self.p.noise_multiplier, rel_tol=1e-12
        ):
            self.refuse("accounting_events", "does not end with the Gaussian of privacy.noise_multiplier")
        expected = self.selection_fixed_events() + self.clip_fixed_events()
        if [event_to_json(e) for e in events[:-1]] != [event_to_json(e) for e in expected]:
            self.refuse(
                "accounting_events", f"is not the composition of {expected!r} with the Gaussian release"
            )
        return expected

    def selection_fixed_events(self) -> list[dp_accounting.DpEvent]:
        if self.selection is None:
            return []
        d = self.selection
        if self.candidates and (d.get("k") != 1 or d.get("max_votes_per_chunk") != 1):
            self.refuse("accounting_events", "rests on a candidate choice that is not one round (k = k' = 1)")
        try:
            plan = plan_private_selection(
                total_epsilon=self.p.epsilon,
                total_delta=self.p.delta,
                k=d["k"],
                max_votes_per_chunk=d["max_votes_per_chunk"],
                selection_fraction=d["selection_fraction"],
                composition=d["composition"],
                monotone=monotone_scores(
                    utility=d.get("utility") if self.candidates else None,
                    neighbouring_relation=self.p.neighbouring_relation,
                ),
            )
        except (DpmtvError, KeyError, TypeError) as exc:
            self.refuse("accounting_events", f"cannot be re-planned from head_selection.details ({exc!r})")
        scale = d.get("noise_scale")  # less noise than the plan's would not be ε_sel-DP; more is
        if scale is not None and not (isinstance(scale, float) and scale >= plan.noise_scale * (1 - 1e-12)):
            self.refuse(
                "accounting_events",
                f"rests on a Gumbel scale {scale!r} below its plan's {plan.noise_scale!r}",
            )
        if (
            d.get("event") != event_to_json(plan.event)
            or d.get("epsilon_selection") != plan.epsilon_selection
        ):
            self.refuse("accounting_events", "disagrees with head_selection.details' event for its k and ε")
        return list(plan.fixed_events)

    def clip_fixed_events(self) -> list[dp_accounting.DpEvent]:
        """The private clip norm's round (none when C was given), re-derived from its record."""
        d = self.p.clip_norm_selection
        if d is None:
            return []
        try:
            fraction, multiplier = float(d["epsilon_fraction"]), float(d["multiplier"])
            grid = clip_norm_candidates(
                low=d["multiplier_low"], high=d["multiplier_high"], count=d["multiplier_count"]
            )
            scales = [float(g) for g in d["layer_scales"]]
            utility, tolerance = d.get("utility", "quantile"), float(d.get("tolerance", 4.0))
        except (DpmtvError, KeyError, TypeError, ValueError) as exc:
            self.refuse("clip_norm_selection", f"cannot be re-derived ({exc!r})")
        if d.get("method") != "private-quantile" or not 0.0 < fraction < 1.0:
            self.refuse("clip_norm_selection", "is not a private quantile with a share of epsilon in (0, 1)")
        if utility not in CLIP_UTILITIES or not 1.0 < tolerance < math.inf:
            self.refuse("clip_norm_selection", f"utility is not one of {CLIP_UTILITIES} with a tolerance > 1")
        epsilon = fraction * self.p.epsilon
        if not _close(float(d.get("epsilon", math.nan)), epsilon):
            self.refuse(
                "clip_norm_selection", f"epsilon is not epsilon_fraction·privacy.epsilon = {epsilon!r}"
            )
        if not any(_close(multiplier, c) for c in grid):
            self.refuse("clip_norm_selection", "multiplier is not on its grid")
        released = self.p.l2_clip_norm
        if len(scales) != len(released) or not all(
            _close(c, multiplier * g) for c, g in zip(released, scales, strict=True)
        ):
            self.refuse("l2_clip_norm", "is not clip_norm_selection's multiplier times its layer scales")
        return [clip_multiplier_event(epsilon=epsilon)]

    def calibrated(self, sampler: NoiseSampler, fixed: list[dp_accounting.DpEvent]) -> None:
        p = self.p
        numbers = (
            f"privacy.l2_sensitivity = {p.l2_sensitivity!r}, privacy.epsilon = {p.epsilon!r}, "
            f"privacy.delta = {p.delta!r}, privacy.noise_sampler = {p.noise_sampler!r}"
        )
        try:
            expected = calibrated_noise_std(
                l2_sensitivity=p.l2_sensitivity,
                epsilon=p.epsilon,
                delta=p.delta,
                sampler=sampler,
                fixed_events=fixed,
            )
        except DpmtvError as exc:
            self.refuse("epsilon", f"cannot be calibrated with {numbers} ({exc})")
        if not math.isclose(p.noise_std, expected, rel_tol=NOISE_STD_RELATIVE_TOLERANCE):
            self.refuse("noise_std", f"is not the calibration {expected!r} for {numbers}")
        if not math.isclose(p.noise_multiplier * p.l2_sensitivity, p.noise_std, rel_tol=1e-9):
            self.refuse("noise_multiplier", "is not privacy.noise_std / privacy.l2_sensitivity")

    def reference_numbers(self, sampler: NoiseSampler) -> None:
        """σ_analytic = Δ·σ₁(ε, δ) and the sampler map's σ (None for samplers without one)."""
        p = self.p
        analytic = p.l2_sensitivity * analytic_gaussian_noise_multiplier(epsilon=p.epsilon, delta=p.delta)
        if p.noise_std_analytic is None or not _close(p.noise_std_analytic, analytic):
            self.refuse("noise_std_analytic", f"is not Δ·σ₁(ε, δ) = {analytic!r}")
        mapped = sampler.privacy_map_noise_std(
            l2_sensitivity=p.l2_sensitivity, epsilon=p.epsilon, delta=p.delta
        )
        if (mapped is None) != (p.noise_std_sampler_map is None) or (
            mapped is not None and not _close(cast(float, p.noise_std_sampler_map), mapped)  # both set
        ):
            self.refuse(
                "noise_std_sampler_map",
                f"is not what sampler {p.noise_sampler!r}'s own map gives ({mapped!r})",
            )

    def spent(self, sampler: NoiseSampler) -> None:
        p = self.p
        expected = epsilon_of(self.event(), delta=p.delta - sampler.reserved_delta(delta=p.delta))
        if not _close(p.epsilon_spent, expected):
            self.refuse(
                "epsilon_spent", f"is not the accountant's {expected!r} for privacy.accounting_events"
            )
        if p.epsilon_spent > p.epsilon:
            self.refuse("epsilon_spent", f"exceeds privacy.epsilon = {p.epsilon!r}")


def _is_private(head_selection: dict[str, Any]) -> bool:
    return head_selection.get("method") in (PRIVATE_SELECTION_METHOD, PRIVATE_CANDIDATES_METHOD)


def _close(value: float, expected: float) -> bool:
    return math.isclose(value, expected, rel_tol=DERIVED_RELATIVE_TOLERANCE)
