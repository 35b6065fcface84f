"""The attack: every target scored, every statistic measured (see the package docstring)."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from dpmtv.audit.membership.metrics import attack_metrics
from dpmtv.audit.membership.report import MembershipReport
from dpmtv.audit.membership.scoring import answer_log_probs
from dpmtv.audit.membership.targets import (
    STATISTICS,
    TargetScores,
    icl_target,
    split_target,
    statistic_scores,
    vector_target,
)
from dpmtv.data.prompts import zero_shot_prompts
from dpmtv.data.records import Record
from dpmtv.errors import ParameterError, RecordError
from dpmtv.heads import HeadSet
from dpmtv.models.loading import LoadedModel
from dpmtv.pipeline.build import BuildSettings


@dataclass(frozen=True, kw_only=True)
class AttackSettings:
    """How :func:`run_membership_attack` attacks (the data are its arguments).

    Attributes:
        build: the DP-MTV build attacked (its ε, δ, clip norms, chunk size, noise sampler).
        heads: the head set the vector patches.
        icl_shots: at most this many demonstrations per ICL prompt (None: as many as fit).
        non_private_mtv: also attack the same build without noise (the ``mtv`` control).
        target_fpr: the FPR at which the TPR is reported, in (0, 1).
        confidence: of the AUC's bootstrap interval, in (0, 1).
        bootstrap_resamples: resamples of that interval.
        batch_size: prompts per forward pass while scoring.
        context_limit: the ICL prompts' token budget (None: the model's context).
        seed: the attack's own randomness (ICL grouping, bootstrap), never the build's noise
            (that is ``build``'s business).
        data_description: public description of the records, copied into the report.
        progress: show progress bars.
    """

    build: BuildSettings
    heads: HeadSet
    icl_shots: int | None = None
    non_private_mtv: bool = False
    target_fpr: float = 0.01
    confidence: float = 0.95
    bootstrap_resamples: int = 2000
    batch_size: int = 8
    context_limit: int | None = None
    seed: int | None = None
    data_description: Mapping[str, Any] = field(default_factory=dict)
    progress: bool = True

    def to_report(self, loaded: LoadedModel, num_members: int, num_non_members: int, num_shadow: int):
        """The public settings of the run, as the report states them."""
        build = self.build
        return {
            "model": loaded.name_or_path,
            "num_members": num_members,
            "num_non_members": num_non_members,
            "num_shadow": num_shadow,
            "heads": len(self.heads),
            "layers": self.heads.layers,
            "icl_shots": self.icl_shots,
            "epsilon": build.epsilon,
            "delta": build.delta,
            "l2_clip_norm": list(build.l2_clip_norm),
            "shots_per_chunk": build.shots_per_chunk,
            "query": build.query,
            "target_fpr": self.target_fpr,
            "confidence": self.confidence,
            "bootstrap_resamples": self.bootstrap_resamples,
            "seed": self.seed,
            "data": dict(self.data_description),
        }


def run_membership_attack(
    loaded: LoadedModel,
    members: Sequence[Record],
    non_members: Sequence[Record],
    settings: AttackSettings,
    *,
    shadow: Sequence[Record] | None = None,
) -> MembershipReport:
    """Attack zero-shot (reference), many-shot ICL with the members in the prompt, the DP-MTV
    vector built from the members with ``settings.build`` (and, with ``non_private_mtv``, the
    same build without noise); see the package docstring. ``shadow`` (public records, at least as
    many as the members, disjoint from both sets) adds the ``shadow`` statistic: each target
    rebuilt from them.

    Raises:
        RecordError: no members or non-members, too few shadow records, or a record in two sets.
        ParameterError: ``target_fpr``/``confidence`` outside (0, 1), too few resamples, or ICL
            prompts that do not fit the context.
    """
    _validate(members, non_members, shadow, target_fpr=settings.target_fpr, confidence=settings.confidence)
    settings.heads.check(loaded.adapter.geometry)
    rng = np.random.default_rng(settings.seed)
    common = {"shadow": shadow, "batch_size": settings.batch_size, "progress": settings.progress}
    reference = _zero_shot_target(loaded, members, non_members, settings)
    targets = [
        reference,
        icl_target(
            loaded,
            members,
            non_members,
            icl_shots=settings.icl_shots,
            context=settings.context_limit,
            rng=rng,
            **common,
        ),
    ]
    builds = [settings.build]
    if settings.non_private_mtv:
        builds.append(dataclasses.replace(settings.build, non_private=True))
    for build in builds:
        targets.append(
            vector_target(loaded, members, non_members, heads=settings.heads, settings=build, **common)
        )
    metrics = [
        attack_metrics(
            *scores,
            target=target.name,
            statistic=statistic,
            target_fpr=settings.target_fpr,
            confidence=settings.confidence,
            resamples=settings.bootstrap_resamples,
            rng=rng,
        )
        for target in targets
        for statistic in STATISTICS
        if (scores := statistic_scores(target, reference, statistic)) is not None
    ]
    num_shadow = 0 if shadow is None else len(members)
    report_settings = settings.to_report(loaded, len(members), len(non_members), num_shadow)
    return MembershipReport(tuple(targets), tuple(metrics), report_settings)


def _zero_shot_target(loaded, members, non_members, settings: AttackSettings) -> TargetScores:
    """The bare model: the reference every ``calibrated`` statistic subtracts."""
    records = [*members, *non_members]
    logp, greedy = answer_log_probs(
        loaded,
        zero_shot_prompts(records),
        [r.answer for r in records],
        batch_size=settings.batch_size,
        progress=settings.progress,
        description="attack: zero-shot",
    )
    description = "zero-shot base model (saw no member)"
    return split_target("zero-shot", description, True, logp, greedy, len(members), {})


def _validate(members, non_members, shadow, *, target_fpr: float, confidence: float) -> None:
    if not members:
        raise RecordError("no member records: the attack needs the private records the target used")
    if not non_members:
        raise RecordError("no non-member records: the attack needs records the target never saw")
    for name, value in (("target FPR", target_fpr), ("confidence", confidence)):
        if not 0.0 < value < 1.0:
            raise ParameterError(f"{name} must be in (0, 1), got {value!r}")
    if shadow is not None and len(shadow) < len(members):
        raise RecordError(
            f"{len(shadow)} shadow (public) records, but the shadow targets need as many as the "
            f"{len(members)} members"
        )
    seen: dict[str, str] = {}
    for role, part in (("member", members), ("non-member", non_members), ("shadow", shadow or ())):
        for record in part:
            if not record.has_explicit_id:
                continue
            if record.record_id in seen and seen[record.record_id] != role:
                raise RecordError(
                    f"{record.where}: record id '{record.record_id}' is both a {seen[record.record_id]} "
                    f"and a {role}; members, non-members and shadow records must be disjoint"
                )
            seen[record.record_id] = role
