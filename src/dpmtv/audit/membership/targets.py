"""The attacked targets (zero-shot, many-shot ICL, the DP-MTV / MTV vector) and their scores."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from dpmtv.artifact.vector import TaskVector
from dpmtv.audit.membership.scoring import answer_log_probs, answer_token_ids
from dpmtv.data.prompts import Example, Prompt, zero_shot, zero_shot_prompts
from dpmtv.data.records import Record
from dpmtv.errors import ParameterError
from dpmtv.eval.generation import context_limit
from dpmtv.forward.prompt_budget import fit_demonstrations, prompt_length
from dpmtv.heads import HeadSet
from dpmtv.models.loading import LoadedModel
from dpmtv.pipeline.build import BuildSettings, build_task_vector

STATISTICS = ("logprob", "calibrated", "shadow")


@dataclass(frozen=True)
class TargetScores:
    """One attacked target: the members' and non-members' log-probabilities of their own answer,
    whether greedy decoding returns it, and (with shadow data) the same records' log-probabilities
    under the shadow target, built the same way from public records."""

    name: str  # "zero-shot" | "icl" | "dp-mtv" | "mtv"
    description: str
    private: bool  # a DP guarantee covers the members
    member_logp: np.ndarray = field(repr=False)
    non_member_logp: np.ndarray = field(repr=False)
    member_greedy: np.ndarray = field(repr=False)
    non_member_greedy: np.ndarray = field(repr=False)
    details: Mapping[str, Any] = field(default_factory=dict)
    member_shadow: np.ndarray | None = field(default=None, repr=False)
    non_member_shadow: np.ndarray | None = field(default=None, repr=False)

    def to_json(self) -> dict[str, Any]:
        data = {
            "name": self.name,
            "description": self.description,
            "private": self.private,
            "member_own_answer_rate": float(self.member_greedy.mean()),
            "non_member_own_answer_rate": float(self.non_member_greedy.mean()),
            "member_mean_logp": float(self.member_logp.mean()),
            "non_member_mean_logp": float(self.non_member_logp.mean()),
            "details": dict(self.details),
            "member_logp": self.member_logp.tolist(),
            "non_member_logp": self.non_member_logp.tolist(),
        }
        if self.member_shadow is not None:
            data["member_shadow_logp"] = self.member_shadow.tolist()
            data["non_member_shadow_logp"] = self.non_member_shadow.tolist()
        return data


def statistic_scores(
    target: TargetScores, reference: TargetScores, statistic: str
) -> tuple[np.ndarray, np.ndarray] | None:
    """(member, non-member) scores of one statistic, or None where it is undefined: ``logprob``;
    ``calibrated`` (minus the zero-shot ``reference``; not for the reference itself); ``shadow``
    (minus the shadow target's score; only with shadow data)."""
    if statistic == "logprob":
        return target.member_logp, target.non_member_logp
    if statistic == "calibrated":
        if target is reference:
            return None  # identically 0
        return target.member_logp - reference.member_logp, target.non_member_logp - reference.non_member_logp
    if statistic == "shadow":
        if target.member_shadow is None:
            return None
        return target.member_logp - target.member_shadow, target.non_member_logp - target.non_member_shadow
    raise ParameterError(f"unknown statistic {statistic!r}; use one of {', '.join(STATISTICS)}")


def _query(record: Record) -> Example:
    return Example(record.load_images(), record.question)


def _demo(record: Record) -> Example:
    return Example(record.load_images(), record.question, record.answer)


def split_target(name, description, private, logp, greedy, num_members, details, shadow=None):
    return TargetScores(
        name,
        description,
        private,
        logp[:num_members],
        logp[num_members:],
        greedy[:num_members],
        greedy[num_members:],
        details,
        None if shadow is None else shadow[:num_members],
        None if shadow is None else shadow[num_members:],
    )


def _icl_groups(
    loaded: LoadedModel,
    members: Sequence[Record],
    *,
    icl_shots: int | None,
    probe: Example,
    budget: int,
    rng: np.random.Generator,
) -> list[list[int]]:
    """Member indices split into as few prompts as the context budget (and ``icl_shots``) allows,
    sized with the longest query ``probe``."""
    if icl_shots is not None and icl_shots < 1:
        raise ParameterError(f"--icl-shots must be >= 1, got {icl_shots}")
    order = rng.permutation(len(members))
    cap = len(members) if icl_shots is None else min(icl_shots, len(members))
    demos = [_demo(members[int(i)]) for i in order[:cap]]
    fits = fit_demonstrations(loaded.adapter, demos, probe, budget=budget)
    if fits < 1:
        raise ParameterError(f"not even one demonstration fits the {budget}-token context budget")
    num_groups = math.ceil(len(members) / fits)
    return [[int(i) for i in part] for part in np.array_split(order, num_groups)]


def _check_icl_lengths(loaded: LoadedModel, demos, probe: Example, budget: int) -> None:
    for index, group_demos in enumerate(demos):
        length = prompt_length(loaded.adapter, Prompt(group_demos, probe))
        if length > budget:
            raise ParameterError(
                f"ICL prompt {index} needs {length} tokens, more than the {budget}-token budget "
                "(context minus the answer); pass a smaller --icl-shots"
            )


def icl_target(
    loaded: LoadedModel,
    members: Sequence[Record],
    non_members: Sequence[Record],
    *,
    shadow: Sequence[Record] | None,
    icl_shots: int | None,
    context: int | None,
    batch_size: int,
    rng: np.random.Generator,
    progress: bool,
) -> TargetScores:
    """Members in as few prompts as fit; each query after its prompt (module docstring). The
    shadow prompts hold public records in the same group sizes, each query after the shadow of
    its own prompt."""
    adapter, records = loaded.adapter, [*members, *non_members]
    queries = [_query(r) for r in records]
    reserve = max(len(answer_token_ids(adapter, zero_shot(q), r.answer)) for q, r in zip(queries, records))
    probe = max(queries, key=lambda q: prompt_length(adapter, zero_shot(q)))
    budget = context_limit(loaded, context) - reserve  # the scored answer must fit as well
    groups = _icl_groups(loaded, members, icl_shots=icl_shots, probe=probe, budget=budget, rng=rng)
    group_of = {i: g for g, group in enumerate(groups) for i in group}
    assignment = [group_of[i] for i in range(len(members))]
    assignment += [int(g) for g in rng.permutation(len(non_members)) % len(groups)]
    answers = [r.answer for r in records]

    def score(pool: Sequence[Record], description: str) -> tuple[np.ndarray, np.ndarray]:
        demos = [tuple(_demo(pool[i]) for i in group) for group in groups]
        _check_icl_lengths(loaded, demos, probe, budget)
        prompts = [Prompt(demos[g], q) for g, q in zip(assignment, queries)]
        return answer_log_probs(
            loaded, prompts, answers, batch_size=batch_size, progress=progress, description=description
        )

    logp, greedy = score(members, "attack: icl")
    shadow_logp = None
    if shadow is not None:
        pool = [shadow[int(i)] for i in rng.permutation(len(shadow))[: len(members)]]
        shadow_logp, _ = score(pool, "attack: icl shadow")
    sizes = [len(group) for group in groups]
    details = {"prompts": len(groups), "shots_per_prompt_min": min(sizes), "shots_per_prompt_max": max(sizes)}
    description = f"many-shot ICL, members in {len(groups)} prompt(s) of {min(sizes)}–{max(sizes)} shots"
    return split_target("icl", description, False, logp, greedy, len(members), details, shadow_logp)


def vector_target(
    loaded: LoadedModel,
    members: Sequence[Record],
    non_members: Sequence[Record],
    *,
    shadow: Sequence[Record] | None,
    heads: HeadSet,
    settings: BuildSettings,
    batch_size: int,
    progress: bool,
) -> TargetScores:
    """The vector built from the members, and the shadow vector built the same way (same
    settings, noise included) from as many public records."""
    result = build_task_vector(loaded, members, heads, settings)
    p = result.vector.metadata.privacy
    name = "dp-mtv" if p.private else "mtv"
    records = [*members, *non_members]

    def score(vector: TaskVector, description: str) -> tuple[np.ndarray, np.ndarray]:
        return answer_log_probs(
            loaded,
            zero_shot_prompts(records),
            [r.answer for r in records],
            vector=vector,
            batch_size=batch_size,
            progress=progress,
            description=description,
        )

    logp, greedy = score(result.vector, f"attack: {name}")
    shadow_logp = None
    if shadow is not None:
        shadow_vector = build_task_vector(loaded, list(shadow[: len(members)]), heads, settings).vector
        shadow_logp, _ = score(shadow_vector, f"attack: {name} shadow")
    details = {
        "epsilon": p.epsilon if p.private else None,  # None: ε = ∞, no guarantee
        "delta": p.delta if p.private else None,
        "epsilon_spent": p.epsilon_spent if p.private else None,
        "num_chunks": p.num_chunks,
        "shots_per_chunk": p.shots_per_chunk,
        "members_unused_by_partition": result.num_unused_records,
        "l2_clip_norm": list(p.l2_clip_norm),
        "l2_sensitivity": p.l2_sensitivity,
        "noise_std": p.noise_std,
        "noise_sampler": p.noise_sampler,
        "secure_noise": p.secure_noise,
        "heads": len(heads),
        "layers": heads.layers,
        "build_warnings": list(result.warnings),
    }
    shape = f"m={p.num_chunks}×s={p.shots_per_chunk}"
    if p.private:
        description = f"DP-MTV vector, (ε={p.epsilon:g}, δ={p.delta:g}), {shape}"
    else:
        description = f"NON-PRIVATE MTV vector (ε = ∞, control), {shape}"
    return split_target(name, description, p.private, logp, greedy, len(members), details, shadow_logp)
