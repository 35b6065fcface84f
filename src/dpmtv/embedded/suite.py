"""The embedded task suite as dpmtv records, and first-token scoring on the embedded model.

Seeds: every split is generated from ``numpy.random.default_rng([seed, task_index, split])``
(``task_index``: the CRC-32 of the task name) so
private, public and test sets never share images, and a seed fixes every pixel.
"""

from __future__ import annotations

import zlib
from collections.abc import Mapping, Sequence

import numpy as np
import torch

from dpmtv.data.prompts import Example, Prompt
from dpmtv.data.records import Record
from dpmtv.embedded.generator import Task, sample_codes_for_task, sample_records
from dpmtv.forward.hooks import LayerPatch, overwrite_heads
from dpmtv.models.base import ModelAdapter

SPLITS = {"private": 0, "public": 1, "test": 2, "public-dev": 3, "public-val": 4, "public-deciding": 5}
PUBLIC_SEED = 1_000_003  # public data is generated from a seed disjoint from the experiment seeds


def task_records(task: Task, n: int, *, seed: int, split: str) -> list[Record]:
    """``n`` records of ``task`` (image, the fixed public question, answer) for one split."""
    rng = np.random.default_rng([seed, _task_index(task), SPLITS[split]])
    generated = sample_records(task, n, rng)
    return [
        Record(
            f"{task.name}-{split}-{seed}-{i}", (image,), generated.question, answer, where=f"{task.name}[{i}]"
        )
        for i, (image, answer) in enumerate(zip(generated.images, generated.answers, strict=True))
    ]


def few_shot_prompt(demos: Sequence[Record], query: Record) -> Prompt:
    return Prompt(
        tuple(Example(r.images, r.question, r.answer) for r in demos), Example(query.images, query.question)
    )


def first_token_correct(
    adapter: ModelAdapter,
    prompts: Sequence[Prompt],
    answers: Sequence[str],
    *,
    patches: Mapping[int, LayerPatch] | None = None,
    batch_size: int = 64,
) -> np.ndarray:
    """Whether the greedy first answer token equals each answer's token (bool per prompt)."""
    answer_ids = torch.tensor(adapter.tokenizer.convert_tokens_to_ids(list(answers)))
    predicted = []
    for start in range(0, len(prompts), batch_size):
        inputs = adapter.encode(prompts[start : start + batch_size])
        with torch.no_grad(), overwrite_heads(adapter, patches or {}):
            predicted.append(adapter.model(**inputs).logits[:, -1].argmax(-1).cpu())
    return (torch.cat(predicted) == answer_ids).numpy()


def _task_index(task: Task) -> int:
    """A stable number per task name (any task of the family, not only the evaluation suite)."""
    return zlib.crc32(task.name.encode())


def task_codes(task: Task, n: int, *, seed: int, split: str) -> np.ndarray:
    """The attribute codes ``(n, 4)`` behind :func:`task_records` (same seed and split), without
    rendering: the records' images are drawn after their codes from the same generator."""
    rng = np.random.default_rng([seed, _task_index(task), SPLITS[split]])
    return sample_codes_for_task(task, n, rng)
