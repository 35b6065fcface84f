r"""Membership inference: does a deployed model reveal whether a record was among the private data?

Why this exists
===============
The empirical audit (:mod:`dpmtv.audit.mechanism`) bounds the release mechanism's ε; this module
shows the *consequence* a user sees: an attacker who queries the adapted model with a record and
guesses from the answer whether that record was one of the private demonstrations. It runs the
same attack against

- ``icl``: plain many-shot in-context learning, the private records (the *members*) sitting in
  the prompt as demonstrations — the non-private way to use them;
- ``dp-mtv``: the model with a DP-MTV task vector built from the same members
  (:func:`dpmtv.build.build_task_vector` with the given :class:`~dpmtv.build.BuildSettings`),
  queried zero-shot through :func:`dpmtv.inference.apply` (the hooks a deployment uses);
- ``zero-shot``: the bare model, which never saw any member — the chance reference (its AUC
  differs from 0.5 only by sampling noise, which shows how large that noise is);
- ``mtv`` (optional, NON-PRIVATE control): the same build without noise. It separates what the
  noise hides from what a single shared vector cannot carry in the first place.

Attack
======
A *query* is a record's image(s) and question; the *score* is the model's log-probability of the
record's own answer, summed over its tokens (teacher forcing, the negative loss — Yeom et al.
2018): ``log p(answer | query)`` with the zero-shot prompt (``zero-shot``, ``dp-mtv``, ``mtv``)
or with the query appended after the many-shot prompt that holds the members (``icl``). Members
and non-members are drawn from one distribution, so a score that separates them can only do so
through what the target learned from the members. A second statistic, ``calibrated``, subtracts
the same record's zero-shot score (a reference model that saw no member; the per-example
difficulty calibration of Watson et al. 2022 / LiRA-offline with the base model as reference): it
removes how plausible the answer is from the image alone and keeps what the private data added.
A third, ``shadow`` (optional: it needs public records of the same distribution), subtracts the
record's score under a *shadow target* built exactly like the attacked one from public records
instead of the members — the ICL prompts refilled with public records in the same group sizes, the
vector rebuilt (noise included) from as many public records: the offline reference-model attack of
LiRA (Carlini et al. 2022) with one shadow. It cancels what any target of that kind does to the
record (e.g. whether its random label happens to agree with the task the prompt implies), which the
zero-shot reference cannot know.

With a vector, the answer's tokens are scored as generation would produce them: the prompt is
run once (the vector patches its last position), then each answer token is fed with the KV cache
and patched in turn (in every-call mode) — exactly what :func:`dpmtv.inference.apply`, in its default
mode for the checkpoint, does while decoding.

Designing records whose membership matters
==========================================
If every answer follows from the image (a clean task), a model that learned the task scores a
non-member as high as a member and no attack can succeed, private or not. Membership becomes
observable when a record's answer can only be known from the record itself, so we randomise
labels: with probability ``label_noise`` a record's answer is redrawn uniformly from a
vocabulary (the task's answer words, or every answer word of the embedded family), independent
of its image; ``label_noise = 1`` makes every answer pure noise, so *any* advantage over chance
is leakage of the member set. Members and non-members are labelled the same way.

Two properties of the build bound what the ``dp-mtv``/``mtv`` attack can see at all: records the
partition leaves unused (``N mod s``) are effectively non-members (reported as
``members_unused_by_partition``), and with ``query="record"`` one record per chunk enters only
through its image (its answer is withheld). And a head set that overwrites every head of every
layer at the last position makes the patched model's output independent of the query image, so
its scores depend on the answer word alone — choose heads that leave the model reading its input.

How ICL prompts are cut
=======================
The members are shuffled and split into as few prompts as the context allows
(``icl_shots`` caps the demonstrations per prompt): each member is queried after the prompt that
contains it, each non-member after one of the prompts (round robin). With one prompt this is the
deployment "all private records in one many-shot prompt".

Metrics
=======
ROC AUC (Mann–Whitney, ties counted one half) with a stratified percentile bootstrap interval;
TPR at a low FPR (default 1%), the largest TPR of a threshold test ``score >= t`` whose FPR does
not exceed it — with ``n`` non-members the smallest non-zero FPR is ``1/n``, so for ``n < 100``
"TPR at 1% FPR" is the TPR at zero false positives (the report says which FPR was achieved);
and a one-sided Mann–Whitney p-value against "no member advantage".

What this is not
================
The report is not differentially private: it holds per-record scores and statistics of the
private records. Run it on data you may analyse (the embedded generator needs none).
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import tempfile
from collections.abc import Mapping, Sequence
from contextlib import nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from scipy import stats

from dpmtv._progress import progress_bar
from dpmtv.build import BuildSettings, build_task_vector
from dpmtv.data.records import Record
from dpmtv.errors import ParameterError, RecordError
from dpmtv.heads import HeadSet
from dpmtv.hooks import PatchMode
from dpmtv.models.base import ModelAdapter
from dpmtv.models.loading import LoadedModel
from dpmtv.prompts import Example, Prompt, zero_shot
from dpmtv.public_clip import public_clip_norms
from dpmtv.vector import TaskVector

__all__ = [
    "STATISTICS",
    "AttackMetrics",
    "MembershipData",
    "MembershipReport",
    "TargetScores",
    "answer_log_probs",
    "answer_token_ids",
    "attack_metrics",
    "bootstrap_auc_interval",
    "embedded_membership_data",
    "public_clip_norms",
    "randomise_labels",
    "roc_auc",
    "roc_curve",
    "run_membership_attack",
    "statistic_scores",
    "tpr_at_fpr",
]

STATISTICS = ("logprob", "calibrated", "shadow")
_CACHE_NAMES = ("cache", "past_key_values")  # transformers >= 5.2x renamed past_key_values


# --------------------------------------------------------------------------------------------
# metrics (pure numpy / scipy)
# --------------------------------------------------------------------------------------------
def _scores(values: Sequence[float] | np.ndarray, name: str) -> np.ndarray:
    array = np.asarray(values, dtype=np.float64).ravel()
    if array.size == 0:
        raise ParameterError(f"{name}: no scores")
    if not np.isfinite(array).all():
        raise ParameterError(f"{name} contains NaN or inf")
    return array


def roc_curve(member_scores, non_member_scores) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(FPR, TPR, thresholds) of the tests "member iff score >= t", one per distinct score, from
    (0, 0) at t = +inf to (1, 1) at the smallest score; FPR and TPR non-decreasing."""
    members, others = _scores(member_scores, "member scores"), _scores(non_member_scores, "non-member scores")
    thresholds = np.concatenate([[np.inf], np.unique(np.concatenate([members, others]))[::-1]])
    tpr = _fraction_at_least(members, thresholds)
    fpr = _fraction_at_least(others, thresholds)
    return fpr, tpr, thresholds


def _fraction_at_least(values: np.ndarray, thresholds: np.ndarray) -> np.ndarray:
    ordered = np.sort(values)
    return (ordered.size - np.searchsorted(ordered, thresholds, side="left")) / ordered.size


def roc_auc(member_scores, non_member_scores) -> float:
    """P(member score > non-member score) + ½·P(tie): the Mann–Whitney U over n₁·n₀, which is
    the area under :func:`roc_curve` (ties are its diagonal segments)."""
    members, others = _scores(member_scores, "member scores"), _scores(non_member_scores, "non-member scores")
    return _auc(members, others)


def _auc(members: np.ndarray, others: np.ndarray) -> float:
    ranks = stats.rankdata(np.concatenate([members, others]))  # average ranks for ties
    u = ranks[: members.size].sum() - members.size * (members.size + 1) / 2.0
    return float(u / (members.size * others.size))


def tpr_at_fpr(member_scores, non_member_scores, max_fpr: float = 0.01) -> tuple[float, float, float]:
    """(TPR, achieved FPR, threshold) of the threshold test with the largest TPR whose FPR is at
    most ``max_fpr``. Always defined: t = +inf gives (0, 0)."""
    if not 0.0 <= max_fpr <= 1.0:
        raise ParameterError(f"max_fpr must be in [0, 1], got {max_fpr!r}")
    fpr, tpr, thresholds = roc_curve(member_scores, non_member_scores)
    allowed = np.flatnonzero(fpr <= max_fpr + 1e-12)
    best = allowed[np.argmax(tpr[allowed])]  # the first maximum: the highest such threshold
    return float(tpr[best]), float(fpr[best]), float(thresholds[best])


def bootstrap_auc_interval(
    member_scores,
    non_member_scores,
    *,
    confidence: float = 0.95,
    resamples: int = 2000,
    rng: np.random.Generator | None = None,
) -> tuple[float, float]:
    """Percentile bootstrap interval of the AUC, resampling members and non-members separately
    (stratified: each resample keeps both sample sizes)."""
    if not 0.0 < confidence < 1.0:
        raise ParameterError(f"confidence must be in (0, 1), got {confidence!r}")
    if resamples < 10:
        raise ParameterError(f"bootstrap resamples must be >= 10, got {resamples}")
    members, others = _scores(member_scores, "member scores"), _scores(non_member_scores, "non-member scores")
    rng = rng if rng is not None else np.random.default_rng()
    values = np.empty(resamples)
    for index in range(resamples):
        picked_members = members[rng.integers(0, members.size, members.size)]
        picked_others = others[rng.integers(0, others.size, others.size)]
        values[index] = _auc(picked_members, picked_others)
    tail = (1.0 - confidence) / 2.0
    low, high = np.quantile(values, [tail, 1.0 - tail])
    return float(low), float(high)


@dataclass(frozen=True)
class AttackMetrics:
    """One attack (a target and a statistic) summarised."""

    target: str
    statistic: str
    auc: float
    auc_low: float
    auc_high: float
    confidence: float
    bootstrap_resamples: int
    tpr_at_fpr: float
    target_fpr: float
    achieved_fpr: float
    threshold: float
    p_value: float  # one-sided Mann–Whitney, H0: members score no higher than non-members
    num_members: int
    num_non_members: int

    def to_json(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        data["threshold"] = self.threshold if math.isfinite(self.threshold) else None  # +inf: flag none
        return data


def attack_metrics(
    member_scores,
    non_member_scores,
    *,
    target: str = "",
    statistic: str = "logprob",
    target_fpr: float = 0.01,
    confidence: float = 0.95,
    resamples: int = 2000,
    rng: np.random.Generator | None = None,
) -> AttackMetrics:
    members, others = _scores(member_scores, "member scores"), _scores(non_member_scores, "non-member scores")
    low, high = bootstrap_auc_interval(members, others, confidence=confidence, resamples=resamples, rng=rng)
    tpr, fpr, threshold = tpr_at_fpr(members, others, target_fpr)
    p_value = float(stats.mannwhitneyu(members, others, alternative="greater").pvalue)
    return AttackMetrics(
        target=target,
        statistic=statistic,
        auc=_auc(members, others),
        auc_low=low,
        auc_high=high,
        confidence=confidence,
        bootstrap_resamples=resamples,
        tpr_at_fpr=tpr,
        target_fpr=target_fpr,
        achieved_fpr=fpr,
        threshold=threshold,
        p_value=p_value,
        num_members=int(members.size),
        num_non_members=int(others.size),
    )


# --------------------------------------------------------------------------------------------
# records whose membership matters
# --------------------------------------------------------------------------------------------
def randomise_labels(
    records: Sequence[Record], *, vocabulary: Sequence[str], noise: float, rng: np.random.Generator
) -> list[Record]:
    """Each record's answer redrawn uniformly from ``vocabulary`` with probability ``noise``
    (independently of its image); the others keep theirs."""
    if not 0.0 <= noise <= 1.0:
        raise ParameterError(f"label noise must be in [0, 1], got {noise!r}")
    words = list(dict.fromkeys(vocabulary))
    if noise > 0 and len(words) < 2:
        raise ParameterError(f"randomising labels needs at least 2 answer words, got {words}")
    out = []
    for record in records:
        if rng.uniform() < noise:
            record = dataclasses.replace(record, answer=words[int(rng.integers(len(words)))])
        out.append(record)
    return out


@dataclass(frozen=True)
class MembershipData:
    """Members, non-members and public records (same distribution, disjoint), described."""

    members: list[Record]
    non_members: list[Record]
    public: list[Record]
    description: Mapping[str, Any]


def embedded_membership_data(
    task_name: str,
    *,
    num_members: int,
    num_non_members: int,
    num_public: int = 0,
    label_noise: float = 1.0,
    label_vocabulary: str = "task",
    seed: int = 0,
) -> MembershipData:
    """Records of one embedded task with randomised labels (module docstring), no files needed.

    ``label_vocabulary``: "task" (the task's own answer words) or "all" (every answer word of the
    embedded family). Members and non-members are one i.i.d. sample, split; public records come
    from a separate stream of the same seed.
    """
    from dpmtv.embedded import generator

    try:
        task = generator.get_task(task_name)
    except KeyError as exc:
        raise ParameterError(f"--embedded-task: {exc.args[0]}") from None
    if label_vocabulary not in ("task", "all"):
        raise ParameterError(f"label vocabulary must be 'task' or 'all', got {label_vocabulary!r}")
    for name, count in (("members", num_members), ("non-members", num_non_members)):
        if count < 1:
            raise ParameterError(f"number of {name} must be >= 1, got {count}")
    vocabulary = task.answers if label_vocabulary == "task" else generator.ANSWER_WORDS
    private_rng, public_rng = (np.random.default_rng([seed, stream]) for stream in (0, 1))
    sampled = _embedded_records(generator, task, num_members + num_non_members, private_rng, "private")
    sampled = randomise_labels(sampled, vocabulary=vocabulary, noise=label_noise, rng=private_rng)
    public = _embedded_records(generator, task, num_public, public_rng, "public") if num_public else []
    public = randomise_labels(public, vocabulary=vocabulary, noise=label_noise, rng=public_rng)
    description = {
        "source": "embedded",
        "task": task.name,
        "task_kind": task.kind,
        "label_noise": label_noise,
        "label_vocabulary": list(vocabulary),
        "seed": seed,
        "num_public": num_public,
    }
    return MembershipData(sampled[:num_members], sampled[num_members:], public, description)


def _embedded_records(generator, task, count: int, rng: np.random.Generator, role: str) -> list[Record]:
    sampled = generator.sample_records(task, count, rng)
    prefix = f"embedded-{task.name}-{role}"
    return [
        Record(
            f"{prefix}-{i}", (image,), sampled.question, answer, where=f"{prefix}[{i}]", has_explicit_id=True
        )
        for i, (image, answer) in enumerate(zip(sampled.images, sampled.answers, strict=True))
    ]


# --------------------------------------------------------------------------------------------
# scoring: log p(answer | prompt), as generation would produce it
# --------------------------------------------------------------------------------------------
def answer_token_ids(adapter: ModelAdapter, prompt: Prompt, answer: str, *, where: str = "") -> list[int]:
    """The answer's tokens as the chat template puts them after the generation prompt (the
    difference between the conversation rendered with and without the answer), up to the first
    special token (the end of turn). Falls back to tokenising the answer alone when the template
    merges the prompt's last token with the answer."""
    tokenizer = adapter.tokenizer
    prefix = tokenizer(adapter.render_text(prompt), add_special_tokens=False)["input_ids"]
    rendered = adapter.render_with_answer(prompt, answer)
    full = tokenizer(rendered, add_special_tokens=False)["input_ids"]
    if full[: len(prefix)] == prefix:
        candidate = full[len(prefix) :]
    else:
        candidate = tokenizer(answer, add_special_tokens=False)["input_ids"]
    special = set(tokenizer.all_special_ids)
    tokens = []
    for token in candidate:
        if token in special:
            break
        tokens.append(int(token))
    if not tokens:
        raise RecordError(f"{where}: the answer {answer!r} has no tokens to score")
    return tokens


def answer_log_probs(
    loaded: LoadedModel,
    prompts: Sequence[Prompt],
    answers: Sequence[str],
    *,
    vector: TaskVector | None = None,
    mode: PatchMode | str | None = None,
    batch_size: int = 8,
    progress: bool = False,
    description: str = "scoring",
) -> tuple[np.ndarray, np.ndarray]:
    """Per prompt: ``log p(answer)`` summed over the answer's tokens (teacher forcing), and
    whether greedy decoding would produce exactly those tokens. With ``vector`` the model is
    patched through :func:`dpmtv.inference.apply` in ``mode`` (None: apply's default, the deployed
    behaviour): the prompt's last position at prefill, then (``every-call``) each fed answer
    token, exactly as while generating — the answer runs through the KV cache step by step."""
    from dpmtv.inference import apply

    if len(prompts) != len(answers):
        raise ParameterError(f"{len(prompts)} prompts but {len(answers)} answers")
    adapter = loaded.adapter
    targets = [
        answer_token_ids(adapter, p, a, where=f"query {i}") for i, (p, a) in enumerate(zip(prompts, answers))
    ]
    by_length: dict[int, list[int]] = {}
    for index, tokens in enumerate(targets):
        by_length.setdefault(len(tokens), []).append(index)  # one batch shape per answer length
    logps, hits = np.empty(len(prompts)), np.zeros(len(prompts), dtype=bool)
    if vector is None:
        patched = nullcontext()
    else:  # mode None: whatever apply() does by default, i.e. what a deployment does
        patched = apply(loaded, vector) if mode is None else apply(loaded, vector, mode=mode)
    with patched, torch.no_grad(), progress_bar(description, len(prompts), enabled=progress) as advance:
        for indices in by_length.values():
            for start in range(0, len(indices), batch_size):
                rows = indices[start : start + batch_size]
                tokens = torch.tensor([targets[i] for i in rows])  # (B, n)
                logp, hit = _teacher_forced(adapter, [prompts[i] for i in rows], tokens)
                logps[rows], hits[rows] = logp, hit
                advance(len(rows))
    return logps, hits


def _teacher_forced(adapter: ModelAdapter, prompts: list[Prompt], tokens: torch.Tensor):
    """Prefill the (left-padded) prompts, then feed answer tokens one by one with the cache."""
    model = adapter.model
    inputs = adapter.encode(prompts)
    device = inputs["input_ids"].device
    tokens = tokens.to(device)
    mask = inputs["attention_mask"]
    output = model(**inputs, use_cache=True)
    total = torch.zeros(tokens.shape[0], dtype=torch.float64, device=device)
    greedy = torch.ones(tokens.shape[0], dtype=torch.bool, device=device)
    for step in range(tokens.shape[1]):
        log_probs = torch.log_softmax(output.logits[:, -1].float(), dim=-1)  # (B, V)
        total += log_probs.gather(1, tokens[:, step : step + 1])[:, 0].double()
        greedy &= log_probs.argmax(dim=-1) == tokens[:, step]
        if step + 1 == tokens.shape[1]:
            break
        mask = torch.cat([mask, torch.ones_like(mask[:, :1])], dim=1)
        cache = next(
            getattr(output, name) for name in _CACHE_NAMES if getattr(output, name, None) is not None
        )
        output = model(
            input_ids=tokens[:, step : step + 1],
            attention_mask=mask,
            **{_cache_argument(model): cache},
            use_cache=True,
        )
    return total.cpu().numpy(), greedy.cpu().numpy()


def _cache_argument(model: torch.nn.Module) -> str:
    import inspect

    return "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"


# --------------------------------------------------------------------------------------------
# targets
# --------------------------------------------------------------------------------------------
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


def _zero_shot_prompts(records: Sequence[Record]) -> list[Prompt]:
    return [zero_shot(_query(record)) for record in records]


def _split_target(name, description, private, logp, greedy, num_members, details, shadow=None):
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
    from dpmtv.eval.generation import fit_demonstrations

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
    from dpmtv.eval.generation import prompt_length

    for index, group_demos in enumerate(demos):
        length = prompt_length(loaded.adapter, Prompt(group_demos, probe))
        if length > budget:
            raise ParameterError(
                f"ICL prompt {index} needs {length} tokens, more than the {budget}-token budget "
                "(context minus the answer); pass a smaller --icl-shots"
            )


def _icl_target(
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
    from dpmtv.eval.generation import context_limit, prompt_length

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
    return _split_target("icl", description, False, logp, greedy, len(members), details, shadow_logp)


def _vector_target(
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
            _zero_shot_prompts(records),
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
    return _split_target(name, description, p.private, logp, greedy, len(members), details, shadow_logp)


# --------------------------------------------------------------------------------------------
# the attack
# --------------------------------------------------------------------------------------------
def run_membership_attack(
    loaded: LoadedModel,
    members: Sequence[Record],
    non_members: Sequence[Record],
    *,
    settings: BuildSettings,
    heads: HeadSet,
    icl_shots: int | None = None,
    non_private_mtv: bool = False,
    shadow: Sequence[Record] | None = None,
    target_fpr: float = 0.01,
    confidence: float = 0.95,
    bootstrap_resamples: int = 2000,
    batch_size: int = 8,
    context_limit: int | None = None,
    seed: int | None = None,
    data_description: Mapping[str, Any] | None = None,
    progress: bool = True,
) -> MembershipReport:
    """Attack zero-shot (reference), many-shot ICL with the members in the prompt, the DP-MTV
    vector built from the members with ``settings`` (and, with ``non_private_mtv``, the same build
    without noise); see the module docstring. ``shadow`` (public records, at least as many as the
    members, disjoint from both sets) adds the ``shadow`` statistic: each target rebuilt from them.
    ``seed`` fixes the attack's own randomness (ICL grouping, bootstrap), never the build's noise
    (that is ``settings``' business).

    Raises:
        RecordError: no members or non-members, too few shadow records, or a record in two sets.
        ParameterError: ``target_fpr``/``confidence`` outside (0, 1), too few resamples, or ICL
            prompts that do not fit the context.
    """
    _validate(members, non_members, shadow, target_fpr=target_fpr, confidence=confidence)
    heads.check(loaded.adapter.geometry)
    rng = np.random.default_rng(seed)
    records = [*members, *non_members]
    zs_logp, zs_greedy = answer_log_probs(
        loaded,
        _zero_shot_prompts(records),
        [r.answer for r in records],
        batch_size=batch_size,
        progress=progress,
        description="attack: zero-shot",
    )
    reference = _split_target(
        "zero-shot", "zero-shot base model (saw no member)", True, zs_logp, zs_greedy, len(members), {}
    )
    common = {"shadow": shadow, "batch_size": batch_size, "progress": progress}
    targets = [reference]
    targets.append(
        _icl_target(
            loaded, members, non_members, icl_shots=icl_shots, context=context_limit, rng=rng, **common
        )
    )
    builds = [settings] + ([dataclasses.replace(settings, non_private=True)] if non_private_mtv else [])
    for build in builds:
        targets.append(_vector_target(loaded, members, non_members, heads=heads, settings=build, **common))
    metrics = [
        attack_metrics(
            *scores,
            target=target.name,
            statistic=statistic,
            target_fpr=target_fpr,
            confidence=confidence,
            resamples=bootstrap_resamples,
            rng=rng,
        )
        for target in targets
        for statistic in STATISTICS
        if (scores := statistic_scores(target, reference, statistic)) is not None
    ]
    report_settings = {
        "model": loaded.name_or_path,
        "num_members": len(members),
        "num_non_members": len(non_members),
        "num_shadow": 0 if shadow is None else len(members),
        "heads": len(heads),
        "layers": heads.layers,
        "icl_shots": icl_shots,
        "epsilon": settings.epsilon,
        "delta": settings.delta,
        "l2_clip_norm": list(settings.l2_clip_norm),
        "shots_per_chunk": settings.shots_per_chunk,
        "query": settings.query,
        "target_fpr": target_fpr,
        "confidence": confidence,
        "bootstrap_resamples": bootstrap_resamples,
        "seed": seed,
        "data": dict(data_description or {}),
    }
    return MembershipReport(tuple(targets), tuple(metrics), report_settings)


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


# --------------------------------------------------------------------------------------------
# report
# --------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class MembershipReport:
    """Scores and metrics of every attacked target, with the public settings of the run."""

    targets: tuple[TargetScores, ...]
    metrics: tuple[AttackMetrics, ...]
    settings: Mapping[str, Any] = field(default_factory=dict)

    HEADER = (
        "target",
        "statistic",
        "AUC",
        "AUC CI",
        "TPR@FPR",
        "FPR",
        "p",
        "members",
        "non-members",
        "own answer m/n",
    )

    def metric(self, target: str, statistic: str = "logprob") -> AttackMetrics:
        for item in self.metrics:
            if item.target == target and item.statistic == statistic:
                return item
        raise KeyError(f"no metrics for target {target!r}, statistic {statistic!r}")

    def target(self, name: str) -> TargetScores:
        return next(t for t in self.targets if t.name == name)

    def to_json(self) -> dict[str, Any]:
        return {
            "settings": dict(self.settings),
            "metrics": [m.to_json() for m in self.metrics],
            "targets": [t.to_json() for t in self.targets],
        }

    def rows(self) -> list[tuple[str, ...]]:
        rows = []
        for m in self.metrics:
            target = self.target(m.target)
            rows.append(
                (
                    m.target,
                    m.statistic,
                    f"{m.auc:.3f}",
                    f"[{m.auc_low:.3f}, {m.auc_high:.3f}]",
                    f"{m.tpr_at_fpr:.3f}",
                    f"{m.achieved_fpr:.3f} (≤{m.target_fpr:g})",
                    f"{m.p_value:.2g}",
                    str(m.num_members),
                    str(m.num_non_members),
                    f"{target.member_greedy.mean():.2f}/{target.non_member_greedy.mean():.2f}",
                )
            )
        return rows

    def to_markdown(self) -> str:
        confidence = self.metrics[0].confidence if self.metrics else 0.95
        resamples = self.metrics[0].bootstrap_resamples if self.metrics else 0
        lines = [
            "# Membership inference: many-shot ICL vs DP-MTV",
            "",
            "Score = log p(record's own answer | query); `calibrated` subtracts the zero-shot model's "
            "score of the same record; `shadow` subtracts its score under the same target rebuilt "
            f"from public records. AUC CI: {confidence:.0%} stratified percentile bootstrap "
            f"({resamples} resamples). TPR@FPR: the best threshold test whose FPR does not exceed the "
            "target (the FPR column shows the one achieved; with n non-members the smallest non-zero "
            "FPR is 1/n). p: one-sided Mann–Whitney, H0 'members score no higher'. Own answer m/n: "
            "how often greedy decoding returns the record's own answer, members/non-members.",
            "",
            "| " + " | ".join(self.HEADER) + " |",
            "|" + "---|" * len(self.HEADER),
            *("| " + " | ".join(row) + " |" for row in self.rows()),
            "",
            "Targets:",
            "",
            *(
                f"- `{t.name}`: {t.description}" + ("" if t.private else " — no privacy guarantee")
                for t in self.targets
            ),
            "",
            "Settings: `" + json.dumps(dict(self.settings), sort_keys=True, default=_json_default) + "`",
            "",
        ]
        return "\n".join(lines)

    def save_plot(self, path: str | Path) -> Path:
        """ROC curves (logprob solid, calibrated dashed), linear and log–log."""
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, axes = plt.subplots(1, 2, figsize=(10, 4.2))
        colours = dict(zip([t.name for t in self.targets], plt.rcParams["axes.prop_cycle"].by_key()["color"]))
        styles = {"logprob": "-", "calibrated": "--", "shadow": "-."}
        for m in self.metrics:
            members, others = statistic_scores(self.target(m.target), self.targets[0], m.statistic)
            fpr, tpr, _ = roc_curve(members, others)
            style = styles[m.statistic]
            label = f"{m.target} {m.statistic} (AUC {m.auc:.2f})"
            for ax in axes:  # straight segments between vertices: ties are diagonal
                ax.plot(fpr, tpr, style, color=colours[m.target], label=label)
        floor = 1.0 / max(1, min(min(m.num_members, m.num_non_members) for m in self.metrics))
        for ax, scale in zip(axes, ("linear", "log")):
            ax.plot([floor / 2, 1], [floor / 2, 1], ":", color="grey", label="chance")
            ax.set_xscale(scale)
            ax.set_yscale(scale)
            ax.set_xlabel("false positive rate")
            ax.set_ylabel("true positive rate")
            ax.grid(alpha=0.3)
        axes[1].set_xlim(floor / 2, 1)
        axes[1].set_ylim(floor / 2, 1)
        axes[0].legend(loc="lower right", fontsize="x-small")
        n = self.metrics[0]
        fig.suptitle(f"membership inference ({n.num_members} members, {n.num_non_members} non-members)")
        fig.tight_layout()
        path = Path(path)
        fig.savefig(path, dpi=120)
        plt.close(fig)
        return path

    def write(self, out_dir: str | Path) -> dict[str, Path]:
        """Write ``membership.json``, ``membership.md`` and ``membership_roc.png`` (folder created)."""
        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        paths = {
            "json": out / "membership.json",
            "markdown": out / "membership.md",
            "plot": out / "membership_roc.png",
        }
        _atomic_text(paths["json"], json.dumps(self.to_json(), indent=2, default=_json_default) + "\n")
        _atomic_text(paths["markdown"], self.to_markdown())
        self.save_plot(paths["plot"])
        return paths


def _json_default(value: Any) -> Any:
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, (np.integer, np.floating)):
        return value.item()
    if isinstance(value, (tuple, set, frozenset)):
        return list(value)
    return str(value)


def _atomic_text(path: Path, text: str) -> None:
    handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    with os.fdopen(handle, "w", encoding="utf-8") as stream:
        stream.write(text)
    os.replace(temporary, path)
