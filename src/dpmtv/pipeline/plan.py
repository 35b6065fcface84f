"""What a build fixes before it reads any private value: the partition and its split for private
selection, the clip norms and Δ, the selection and release plans (σ), the accounting event the
ledger charges, and the operator's notes. Every number here is a function of public settings and
of the partition's layout, never of a private value (docs/design.md §2, steps 1-2)."""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from dataclasses import dataclass, replace

import dp_accounting

from dpmtv.data.records import Record
from dpmtv.errors import NumericalError
from dpmtv.heads import HeadSet, parse_head_spec
from dpmtv.models.base import HeadGeometry
from dpmtv.models.loading import LoadedModel
from dpmtv.pipeline.partition import partition_for_build
from dpmtv.pipeline.settings import BuildSettings
from dpmtv.privacy import (
    Partition,
    PrivacyUnit,
    PrivatePartition,
    event_to_json,
    l2_sensitivity,
    make_sampler,
    parse_l2_clip_norms,
)
from dpmtv.privacy.clip_quantile import (
    clip_choice_score_tolerance,
    clip_multiplier_event,
    multiplier_score_range,
)
from dpmtv.privacy.disjoint import ChargedEvent, DisjointReleases
from dpmtv.privacy.noise import NoiseSampler
from dpmtv.privacy.noisy_top_k import PrivateSelectionPlan, monotone_scores, plan_private_selection
from dpmtv.privacy.release import GaussianReleasePlan, plan_gaussian_release
from dpmtv.privacy.sensitivity import worst_case_clip_norms
from dpmtv.privacy.signal import signal_to_noise_per_layer, weak_signal_warnings

__all__ = [
    "BuildLayout",
    "BuildPlan",
    "chosen_clip_layout",
    "plan_build",
    "plan_chosen_clip",
    "plan_layout",
    "plan_selection",
    "private_clip_events",
    "private_clip_notes",
    "sensitivity_clip_norms",
]


@dataclass(frozen=True)
class BuildLayout:
    """What a build fixes before it reads any private value: the partition (with its private
    counts), the selection and release chunks, the clip norms, the norms the release's Δ rests on
    (:func:`sensitivity_clip_norms`, as the artifact records them) and Δ.

    :func:`build_task_vector` and the sensitivity audit (:mod:`dpmtv.audit.sensitivity`) both
    get it from :func:`plan_layout`, so the audit measures the build's own wiring and Δ."""

    chunked: PrivatePartition
    selection_part: Partition
    release_part: Partition
    l2_clip_norms: dict[int, float]  # with a private clip norm: provisional (1.0) until chosen
    sensitivity_clip_norms: list[float]
    l2_sensitivity: float


def plan_layout(
    loaded: LoadedModel, records: Sequence[Record], heads: HeadSet | None, settings: BuildSettings
) -> BuildLayout:
    """Partition ``records`` for the settings' privacy unit and relation, split the chunks for
    private selection, and compute Δ over the released (or candidate) layers."""
    chunked, selection_part, release_part = partition_for_build(records, settings)
    candidate_layers = _candidates(loaded, heads, settings).layers
    clip_norms = parse_l2_clip_norms(list(settings.l2_clip_norm), candidate_layers)
    norms, sensitivity = _sensitivity(clip_norms, heads, settings, release_part.num_chunks)
    return BuildLayout(chunked, selection_part, release_part, clip_norms, norms, sensitivity)


@dataclass(frozen=True)
class BuildPlan:
    """A build's plan: its layout, the heads its public checks run on (the released heads, or
    private selection's pool), noise sampler, selection and release plans (``release`` is None
    for a non-private build), the private clip round's ε (None without one), the event the
    ledger charges, and the notes for the operator."""

    layout: BuildLayout
    candidates: HeadSet
    sampler: NoiseSampler
    selection: PrivateSelectionPlan | None
    release: GaussianReleasePlan | None
    clip_epsilon: float | None
    event: ChargedEvent
    notes: tuple[str, ...]


def plan_build(
    loaded: LoadedModel, records: Sequence[Record], heads: HeadSet | None, settings: BuildSettings
) -> BuildPlan:
    """Fix every number of the build from public settings and the partition's layout."""
    sampler = make_sampler(
        settings.noise_sampler, seed=settings.insecure_seed, allow_insecure_seed=settings.allow_insecure_seed
    )
    layout = plan_layout(loaded, records, heads, settings)
    notes = count_notes(layout.chunked, settings, stacklevel=4)
    selection = plan_selection(settings)
    release = plan_release(settings, layout.l2_sensitivity, sampler, selection)
    if settings.private_clip is None:  # a private C is not known yet
        notes += weak_signal_notes(loaded, heads, release, layout.l2_clip_norms, stacklevel=4)
    else:
        notes += private_clip_notes(settings, layout.release_part.num_chunks, stacklevel=4)
    clip_epsilon = next((float(e.noise_parameter) for e in private_clip_events(settings)), None)
    candidates = _candidates(loaded, heads, settings)
    event = build_event(release, selection)
    return BuildPlan(layout, candidates, sampler, selection, release, clip_epsilon, event, tuple(notes))


def plan_chosen_clip(
    plan: BuildPlan, clip_norms: dict[int, float], heads: HeadSet, settings: BuildSettings
) -> BuildPlan:
    """The plan with the privately chosen clip norms (``--l2-clip-norm private``): their Δ (a
    function of an ε-DP output) and the release planned again from it, refused unless it carries
    the event already charged (the Gaussian's multiplier does not depend on Δ)."""
    chosen = chosen_clip_layout(plan.layout, clip_norms, heads, settings)
    release = plan_release(settings, chosen.l2_sensitivity, plan.sampler, plan.selection)
    if (
        release is None
        or plan.release is None
        or event_to_json(release.event) != event_to_json(plan.release.event)
    ):
        raise NumericalError("the release planned from the chosen clip norms is not the charged event")
    return replace(plan, layout=chosen, release=release)


def chosen_clip_layout(
    layout: BuildLayout, clip_norms: dict[int, float], heads: HeadSet, settings: BuildSettings
) -> BuildLayout:
    """``layout`` with the privately chosen clip norms and their Δ (the build's, and the
    sensitivity audit's for a private C)."""
    norms, sensitivity = _sensitivity(clip_norms, heads, settings, layout.release_part.num_chunks)
    return replace(layout, l2_clip_norms=clip_norms, sensitivity_clip_norms=norms, l2_sensitivity=sensitivity)


def _candidates(loaded: LoadedModel, heads: HeadSet | None, settings: BuildSettings) -> HeadSet:
    return heads if heads is not None else selection_pool(settings, loaded.adapter.geometry)


def count_notes(chunked: PrivatePartition, settings: BuildSettings, *, stacklevel: int = 3) -> list[str]:
    """Notes that depend on the private data's size, for the operator only (never stored).

    δ is compared with the number of protected units (records, or users at user level): a
    δ >= 1/#units permits releasing one unit's data outright. Under add-remove-one and user level
    the counts are private, and so is whether δ >= 1/#units holds (it flips between N = 20 and
    N = 21 at δ = 0.049): the warning is given there only with ``show_private_counts``.
    """
    show = settings.show_private_counts or chunked.counts_are_public
    user = settings.privacy_unit is PrivacyUnit.USER
    units, name = chunked.num_protected_units, "users" if user else "records"
    notes = []
    if show and not settings.non_private and units > 0 and settings.delta >= 1.0 / units:
        notes.append(
            f"delta = {settings.delta:g} is >= 1/#{name} = {1.0 / units:g} for {units} {name}; such a "
            f"delta permits leaking one of the {name} outright; choose delta well below 1/#{name}"
        )
        warnings.warn(notes[-1], stacklevel=stacklevel)
    if user:
        notes.append(
            f"user level: {chunked.describe_counts()} (private counts: shown to you, never stored)"
            if settings.show_private_counts
            else "user level: records beyond --max-records-per-user are dropped; how many is a "
            "private count (--show-private-counts shows it; it is never stored)"
        )
    return notes


def plan_selection(settings: BuildSettings) -> PrivateSelectionPlan | None:
    """The private selection's plan (its ε share, k, k', noise scale, event); None without one."""
    selection = settings.private_selection
    if selection is None:
        return None
    candidates = selection.method == "candidates"  # one round of sensitivity 1 (selection.candidates)
    assert selection.selection_fraction is not None  # PrivateSelectionSettings fills its defaults when made
    utility = selection.utility if selection.chooses_after_release else None
    return plan_private_selection(
        total_epsilon=settings.epsilon,
        total_delta=settings.delta,
        k=1 if candidates else selection.k,
        max_votes_per_chunk=1 if candidates else selection.max_votes_per_chunk,
        selection_fraction=selection.selection_fraction,
        composition=selection.composition,
        monotone=monotone_scores(utility=utility, neighbouring_relation=settings.relation.value),
    )


def selection_pool(settings: BuildSettings, geometry: HeadGeometry) -> HeadSet:
    """Private selection's public candidate heads."""
    pool = "all" if settings.private_selection is None else settings.private_selection.pool
    return parse_head_spec(pool, geometry)


def _sensitivity(
    clip_norms: dict[int, float], heads: HeadSet | None, settings: BuildSettings, num_chunks: int
) -> tuple[list[float], float]:
    """The norms Δ rests on (:func:`sensitivity_clip_norms`) and Δ over the released layers; with
    private selection, the worst case over the at most min(k, #pool layers) layers the ``k``
    selected heads can occupy (data-independent). With a private clip norm it is computed again
    from the chosen norms (:func:`plan_chosen_clip`)."""
    norms = sensitivity_clip_norms(clip_norms, heads, settings)
    return norms, l2_sensitivity(l2_clip_norms=norms, num_chunks=num_chunks, relation=settings.relation)


def sensitivity_clip_norms(
    clip_norms: dict[int, float], heads: HeadSet | None, settings: BuildSettings
) -> list[float]:
    """The norms the build's Δ rests on, and that the artifact records: the released layers', or
    with private selection (``heads`` then None or the selected ones) the worst case over the
    pool's layers, which ``clip_norms`` then holds."""
    if settings.private_selection is None:
        assert heads is not None  # without private selection the heads are known before the build
        return [clip_norms[layer] for layer in heads.layers]
    selection = settings.private_selection
    # a candidate may hold every pool layer (selection.candidates); k heads occupy at most k layers
    layers = len(clip_norms) if selection.method == "candidates" else selection.k
    return worst_case_clip_norms(list(clip_norms.values()), max_layers=layers)


def private_clip_notes(settings: BuildSettings, num_chunks: int, *, stacklevel: int = 3) -> list[str]:
    """Warn (at once, and in the result) when the clip round's utility bound at the public ``m``
    exceeds half its score range: the chosen C may then be far from the quantile, in either
    direction (too small loses the signal, too large drowns it)."""
    clip = settings.private_clip
    if clip is None:
        return []
    (event,) = private_clip_events(settings)
    tolerance = clip_choice_score_tolerance(
        epsilon=float(event.noise_parameter),
        candidates=clip.multipliers,
        alpha=clip.quantile,
        utility=clip.utility,
    )
    # the score of a candidate beyond every chunk: the whole range at the public m
    score_range = multiplier_score_range(num_chunks=num_chunks, alpha=clip.quantile, utility=clip.utility)
    if tolerance <= 0.5 * score_range:
        return []
    note = (
        f"the clip norm's private round is weak: at epsilon {float(event.noise_parameter):.3g} "
        f"(--clip-epsilon-fraction {clip.epsilon_fraction:g}) over m = {num_chunks} chunks its choice may "
        f"fall anywhere on the grid (score tolerance {tolerance:.3g} against a range of {score_range:.3g}); "
        "raise --clip-epsilon-fraction, use more chunks, or give C"
    )
    warnings.warn(note, stacklevel=stacklevel)
    return [note]


def private_clip_events(settings: BuildSettings) -> tuple[dp_accounting.DpEvent, ...]:
    """The private clip norm's one pure round at its share of ε (none without one)."""
    clip = settings.private_clip
    if clip is None:
        return ()
    return (clip_multiplier_event(epsilon=clip.epsilon_fraction * settings.epsilon),)


def plan_release(
    settings: BuildSettings,
    sensitivity: float,
    sampler: NoiseSampler,
    selection_plan: PrivateSelectionPlan | None,
) -> GaussianReleasePlan | None:
    if settings.non_private:
        return None
    fixed = selection_plan.fixed_events if selection_plan is not None else ()
    fixed = (*fixed, *private_clip_events(settings))  # the clip runs on the release chunks
    return plan_gaussian_release(
        l2_sensitivity=sensitivity,
        epsilon=settings.epsilon,
        delta=settings.delta,
        sampler=sampler,
        fixed_events=fixed,
    )


def build_event(
    plan: GaussianReleasePlan | None, selection_plan: PrivateSelectionPlan | None
) -> ChargedEvent:
    """What the build costs, for the ledger. Sequential: the plan's composed event. Parallel
    composition (selection and release on disjoint halves): :class:`DisjointReleases` of the
    two, which costs the worse of them, not their composition (see :mod:`dpmtv.privacy.disjoint`)."""
    if plan is None:
        return dp_accounting.NonPrivateDpEvent()
    if selection_plan is None or selection_plan.composition == "sequential":
        return plan.event
    return DisjointReleases((selection_plan.event, plan.event))


def weak_signal_notes(
    loaded: LoadedModel,
    heads: HeadSet | None,
    plan: GaussianReleasePlan | None,
    clip_norms: dict[int, float],
    *,
    stacklevel: int = 3,
) -> list[str]:
    """Warn (at once, and in the result) when the expected noise norm of a released layer exceeds
    its signal bound C_l; heads chosen privately are not known yet, so that case is skipped."""
    if plan is None or heads is None:
        return []
    layers = signal_to_noise_per_layer(
        noise_std=plan.noise_std,
        l2_clip_norms=clip_norms,
        num_coordinates=heads.layer_widths(loaded.adapter.geometry.head_dim),
    )
    notes = weak_signal_warnings(layers)
    for note in notes:
        warnings.warn(note, stacklevel=stacklevel)
    return notes
