"""Records whose membership matters: randomised labels, the embedded task's member / non-member /
public records (clip norms from public records: :mod:`dpmtv.pipeline.public_clip`)."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from dpmtv.data.records import Record
from dpmtv.embedded import generator
from dpmtv.errors import ParameterError


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
    try:
        task = generator.get_task(task_name)
    except ParameterError as exc:
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
