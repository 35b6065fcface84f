"""Batched greedy generation for arbitrary prompts, fitting demonstrations into the context, and
the small shared helpers of the methods (example cache, seed derivation, prediction cleanup)."""

from __future__ import annotations

import hashlib
import itertools
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator, Sequence

import torch

from dpmtv.data.prompts import Example, Prompt
from dpmtv.data.records import Record
from dpmtv.forward.extract import iter_batches
from dpmtv.forward.prompt_budget import fit_demonstrations, model_position_limit, prompt_length  # noqa: F401 (re-exported)
from dpmtv.inference import generate_texts
from dpmtv.models.base import ModelAdapter
from dpmtv.models.loading import LoadedModel


def derive_seed(seed: int, *labels: object) -> int:
    """A 63-bit seed from a run seed and labels, so methods and ε values draw independent
    streams that are still reproducible from the run seed."""
    text = "/".join(str(part) for part in (seed, *labels))
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "big") >> 1


def clean_prediction(text: str) -> str:
    """The first non-empty line of a generation, stripped — applied to every method alike."""
    return next((line.strip() for line in text.splitlines() if line.strip()), "")


class ExampleCache:
    """Records → :class:`Example` (images decoded), keeping the last ``maxsize`` decoded."""

    def __init__(self, maxsize: int = 2048):
        self._cache: OrderedDict[tuple[str, bool], Example] = OrderedDict()
        self._maxsize = maxsize

    def __call__(self, record: Record, *, with_answer: bool) -> Example:
        key = (record.record_id, with_answer)
        if key in self._cache:
            self._cache.move_to_end(key)
            return self._cache[key]
        example = Example(record.load_images(), record.question, record.answer if with_answer else None)
        self._cache[key] = example
        if len(self._cache) > self._maxsize:
            self._cache.popitem(last=False)
        return example


def context_limit(loaded: LoadedModel, override: int | None = None) -> int:
    """Token budget of one prompt: ``override``, else the text model's position limit."""
    return int(override) if override is not None else model_position_limit(loaded.adapter)


def generate_answers(
    loaded: LoadedModel,
    prompts: Iterable[Prompt],
    *,
    max_new_tokens: int,
    batch_size: int,
    advance: Callable[[int], None] = lambda n: None,
) -> list[str]:
    """Greedy answers for ``prompts`` (consumed lazily, ``batch_size`` per forward pass)."""
    answers: list[str] = []
    iterator = iter(prompts)
    while batch := list(itertools.islice(iterator, batch_size)):
        answers.extend(_generate(loaded.adapter, batch, max_new_tokens))
        advance(len(batch))
    return answers


def encoded_within_budget(
    adapter: ModelAdapter, prompts: Sequence[Prompt], *, budget: int, batch_size: int
) -> Iterator[tuple[dict[str, torch.Tensor], list[int]]]:
    """``prompts`` in batches of ``batch_size``, each cut to ``budget`` tokens by
    :func:`fit_demonstrations` (its leading demonstrations that fit) and encoded: per batch the
    model inputs and each prompt's number of demonstrations kept.

    A batch is encoded once when all its prompts fit, the common case: a row's length is its
    attention mask's sum, the length of the prompt encoded alone. Only a batch with a longer prompt
    is cut prompt by prompt and encoded again.

    Raises:
        ParameterError: a query alone exceeds the budget.
    """
    for batch in iter_batches(prompts, batch_size):
        inputs = adapter.encode(batch)
        mask = inputs.get("attention_mask")
        lengths = (
            mask.sum(dim=1).tolist() if mask is not None else [inputs["input_ids"].shape[1]] * len(batch)
        )
        if max(lengths) <= budget:
            yield inputs, [len(prompt.demonstrations) for prompt in batch]
            continue
        kept = [
            len(p.demonstrations)
            if n <= budget
            else fit_demonstrations(adapter, p.demonstrations, p.query, budget=budget)
            for p, n in zip(batch, lengths, strict=True)
        ]
        fitted = [Prompt(p.demonstrations[:k], p.query) for p, k in zip(batch, kept, strict=True)]
        yield adapter.encode(fitted), kept


def _generate(adapter: ModelAdapter, prompts: Sequence[Prompt], max_new_tokens: int) -> list[str]:
    return [clean_prediction(t) for t in generate_texts(adapter, prompts, max_new_tokens=max_new_tokens)]
