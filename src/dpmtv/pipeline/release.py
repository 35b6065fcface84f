"""The private part of a build, run by :func:`dpmtv.pipeline.build.build_task_vector` under
:func:`~dpmtv.pipeline.private_phase.run_private_phase`: each step once, each given what it needs.

1. with private selection: ``charge()``, then the noisy selection on the plan's selection chunks
   (:mod:`dpmtv.selection.private`);
2. the public reference over the released heads (:mod:`dpmtv.pipeline.reference`);
3. the release chunks' clipped sums: at the plan's clip norms (:mod:`dpmtv.pipeline.tasks`), or
   at norms chosen privately from the chunks (:mod:`dpmtv.pipeline.private_clip`), then Δ and the
   release planned again from them (:func:`dpmtv.pipeline.plan.plan_chosen_clip`);
4. the mean, noised once (:func:`dpmtv.privacy.release.release_clipped_sum`), charged just
   before its draw if nothing was charged yet.

A candidate choice on the release (``--selection-utility released-probability``,
:mod:`dpmtv.selection.released`) runs 2-4 over the whole pool first, then chooses among the
candidates on that release and keeps the chosen heads' part of it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from dpmtv.data.records import Record
from dpmtv.errors import ParameterError
from dpmtv.forward._prepare import reusing_workers
from dpmtv.forward.executor import Executor
from dpmtv.heads import HeadSet
from dpmtv.models.loading import LoadedModel
from dpmtv.pipeline.artifact import per_head_rows
from dpmtv.pipeline.plan import BuildLayout, BuildPlan, plan_chosen_clip
from dpmtv.pipeline.private_clip import ClipChoice, private_clip_sums
from dpmtv.pipeline.reference import public_reference
from dpmtv.pipeline.selection_noise import candidate_release_std
from dpmtv.pipeline.settings import BuildSettings
from dpmtv.pipeline.tasks import sum_clipped_chunks
from dpmtv.privacy import Partition, derive_insecure_seed, seeded_rng
from dpmtv.privacy.noisy_top_k import PrivateSelectionPlan
from dpmtv.privacy.release import NoisedVector, release_clipped_sum
from dpmtv.selection.candidates import CandidateUtilities, candidate_head_sets, select_private_candidates
from dpmtv.selection.private import select_private
from dpmtv.selection.released import select_on_release
from dpmtv.selection.result import SelectionResult

__all__ = ["PrivateRelease", "candidate_task", "private_release", "select_heads_privately"]


@dataclass(frozen=True)
class PrivateRelease:
    """What the private part of a build gives the artifact: the released heads and their
    selection record, the public centering reference, the noised release, the layout with the
    clip norms and Δ used, and the private clip choice (None when C was given)."""

    heads: HeadSet
    head_selection: dict[str, Any]
    reference: dict[int, np.ndarray]
    noised: NoisedVector
    layout: BuildLayout
    clip_choice: ClipChoice | None


@reusing_workers()  # the selection, clip and release passes share their prepare workers
def private_release(
    loaded: LoadedModel,
    records: Sequence[Record],
    heads: HeadSet | None,
    settings: BuildSettings,
    plan: BuildPlan,
    charge: Callable[[], None],
    executor: Executor | None,
) -> PrivateRelease:
    """(Private selection,) the public reference, the clipped sums (with a private clip norm: the
    chosen C and its plan), noise once (module docstring). ``heads`` is None with private
    selection; ``charge()`` charges the ledger the first time it is called."""
    chosen = settings.private_selection
    if heads is None and chosen is not None and chosen.chooses_after_release:
        return _release_then_choose(loaded, records, settings, plan, charge, executor)
    head_selection = settings.head_selection
    if heads is None:
        charge()
        part = plan.layout.selection_part
        selection = select_heads_privately(
            loaded, records, plan.selection, part, plan.candidates, settings, executor, plan
        )
        heads, head_selection = selection.heads, selection.to_metadata()
    return _release(loaded, records, heads, head_selection, settings, plan, charge, executor)


def _release(
    loaded: LoadedModel,
    records: Sequence[Record],
    heads: HeadSet,
    head_selection: dict[str, Any],
    settings: BuildSettings,
    plan: BuildPlan,
    charge: Callable[[], None],
    executor: Executor | None,
) -> PrivateRelease:
    """The public reference over ``heads``, their clipped sums (given or private C), noise once."""
    public = public_reference(loaded, heads, settings)
    release_part, choice = plan.layout.release_part, None
    if settings.private_clip is None:
        norms = plan.layout.l2_clip_norms
        sums = sum_clipped_chunks(
            loaded, records, release_part, heads, settings, public.centering, norms, executor=executor
        )
    else:
        choice, sums = private_clip_sums(
            loaded,
            records,
            release_part,
            heads,
            settings,
            public,
            epsilon=plan.clip_epsilon,
            charge=charge,
            executor=executor,
        )
        plan = plan_chosen_clip(plan, choice.l2_clip_norms, heads, settings)
    noised = release_clipped_sum(
        sums,
        num_chunks=release_part.num_chunks,
        plan=plan.release,
        sampler=plan.sampler,
        before_noise=charge,  # a non-private build is recorded too (a ledger voids the dataset)
        allow_non_private=settings.non_private,
        l2_sensitivity=plan.layout.l2_sensitivity,
    )
    return PrivateRelease(heads, head_selection, public.centering, noised, plan.layout, choice)


def _release_then_choose(
    loaded: LoadedModel,
    records: Sequence[Record],
    settings: BuildSettings,
    plan: BuildPlan,
    charge: Callable[[], None],
    executor: Executor | None,
) -> PrivateRelease:
    """``--selection-utility released-*`` (:mod:`dpmtv.selection.released`): the whole pool
    released (its Δ is already the pool's worst case, the plan's), then the candidate choice on
    that release; the artifact keeps the chosen heads' part of it (post-processing)."""
    pool, chosen = plan.candidates, settings.private_selection
    if plan.selection is None or chosen is None:
        raise ParameterError("a choice on the release needs private selection settings")
    assert chosen.utility is not None  # PrivateSelectionSettings fills its defaults when made
    whole = _release(loaded, records, pool, {}, settings, plan, charge, executor)
    d = loaded.adapter.geometry.head_dim
    rows = per_head_rows(whole.noised.layers, pool, d) + per_head_rows(whole.reference, pool, d)
    seed = settings.insecure_seed
    selection = select_on_release(
        loaded,
        records,
        pool,
        rows,
        candidates=candidate_head_sets(chosen.candidates, pool),
        candidate_list=chosen.candidates,
        utility=chosen.utility,
        plan=plan.selection,
        rng=None if seed is None else seeded_rng(derive_insecure_seed(seed, "private-selection")),
        progress=settings.progress,
    )
    heads = selection.heads
    choice = whole.clip_choice
    if choice is not None:  # the released layers' scales, as the artifact records them
        choice = replace(choice, layer_scales={layer: choice.layer_scales[layer] for layer in heads.layers})
    noised = whole.noised
    return PrivateRelease(
        heads,
        selection.to_metadata(),
        _restricted(whole.reference, pool, heads, loaded),
        replace(noised, layers=_restricted(noised.layers, pool, heads, loaded)),
        whole.layout,
        choice,
    )


def _restricted(
    per_layer: Mapping[int, np.ndarray], pool: HeadSet, heads: HeadSet, loaded: LoadedModel
) -> dict[int, np.ndarray]:
    """The per-layer flat vectors of ``pool`` cut to ``heads ⊆ pool`` (same layout, fewer heads)."""
    d = loaded.adapter.geometry.head_dim
    out = {}
    for layer in heads.layers:
        rows = np.asarray(per_layer[layer]).reshape(-1, d)
        index = [pool.heads_in(layer).index(head) for head in heads.heads_in(layer)]
        kept = rows[index].reshape(-1).copy()
        kept.setflags(write=False)
        out[layer] = kept
    return out


def select_heads_privately(
    loaded: LoadedModel,
    records: Sequence[Record],
    selection_plan: PrivateSelectionPlan | None,
    selection_part: Partition,
    pool: HeadSet,
    settings: BuildSettings,
    executor: Executor | None,
    plan: BuildPlan | None = None,
) -> SelectionResult:
    """The private head selection on the plan's selection chunks ``selection_part`` among the
    public ``pool`` (its noise is drawn here; seeded only in seeded builds). The build's (with its
    ``plan``, for a noise-aware utility's std), and the sensitivity audit's choice on ``D``
    (:mod:`dpmtv.audit.sensitivity`)."""
    chosen = settings.private_selection
    if selection_plan is None or chosen is None:  # build: no head set comes with private selection settings
        raise ParameterError("private selection needs private selection settings")
    seed = settings.insecure_seed
    rng = None if seed is None else seeded_rng(derive_insecure_seed(seed, "private-selection"))
    if chosen.method == "candidates":
        return select_private_candidates(
            loaded,
            records,
            selection_part,
            task=candidate_task(loaded, pool, settings, plan),
            plan=selection_plan,
            rng=rng,
            progress=settings.progress,
            executor=executor,
        )
    return select_private(
        loaded,
        records,
        selection_part,
        shots_per_chunk=settings.shots_per_chunk,
        plan=selection_plan,
        pool=pool,
        max_prompt_tokens=settings.max_prompt_tokens,
        rng=rng,
        progress=settings.progress,
        executor=executor,
        prepare_workers=settings.prepare_workers,
        private_batch_size=settings.private_batch_size or 1,
    )


def candidate_task(
    loaded: LoadedModel, pool: HeadSet, settings: BuildSettings, plan: BuildPlan | None = None
) -> CandidateUtilities:
    """The chunk task of ``--private-selection candidates``: each chunk's utility for every public
    candidate head set over ``pool``. A noise-aware utility adds the release's public noise std of
    each candidate (from ``plan``); without a plan (the sensitivity audit) the noise is zero, a
    fixed noise for which the sensitivity bound holds as for any other."""
    chosen = settings.private_selection
    if chosen is None or chosen.method != "candidates":
        raise ParameterError("the candidate utilities need --private-selection candidates")
    assert chosen.utility is not None  # PrivateSelectionSettings fills its defaults when made
    candidates = tuple(candidate_head_sets(chosen.candidates, pool))
    std = None
    if chosen.utility.startswith("noisy-"):
        std = (
            (0.0,) * len(candidates)
            if plan is None
            else candidate_release_std(loaded, candidates, plan, settings)
        )
    seed = settings.insecure_seed
    return CandidateUtilities(
        candidates=candidates,
        candidate_list=chosen.candidates,
        pool=pool,
        utility=chosen.utility,
        max_prompt_tokens=settings.max_prompt_tokens,
        shots_per_chunk=settings.shots_per_chunk,
        prepare_workers=settings.prepare_workers,
        private_batch_size=settings.private_batch_size or 1,
        noise_std=std,
        noise_seed=0 if seed is None else derive_insecure_seed(seed, "selection-utility-noise"),
    )
