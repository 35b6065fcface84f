"""The token budget of one prompt, applied by a public rule (model plumbing, no privacy).

Rule ``keep-leading-demonstrations``: a prompt longer than ``max_prompt_tokens`` keeps the
largest ``k`` such that its first ``k`` demonstrations plus its query fit; a prompt whose query
alone does not fit is dropped (a private chunk then contributes nothing: no vector, no vote).
Both outcomes are functions of that one prompt and of the public budget, never of other prompts,
so the rule leaves every chunk a function of its own records (``docs/design.md``, "Fixed-shape
private forward passes").
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from dpmtv.data.prompts import Example, Prompt
from dpmtv.errors import ParameterError
from dpmtv.models.base import ModelAdapter

OVER_LENGTH_RULE = "keep-leading-demonstrations"
OVER_LENGTH_RULE_HELP = (
    "a longer prompt keeps its leading demonstrations that fit; a chunk whose query alone does not "
    "fit contributes nothing"
)


def model_position_limit(adapter: ModelAdapter) -> int:
    """The text model's position limit (``max_position_embeddings``): a public default budget."""
    config = adapter.text_config(adapter.model.config)
    limit = getattr(config, "max_position_embeddings", None)
    if not limit:
        raise ParameterError("the model config has no max_position_embeddings; pass a context limit")
    return int(limit)


def resolve_max_prompt_tokens(adapter: ModelAdapter, max_prompt_tokens: int | None) -> int:
    """``max_prompt_tokens``, else the model's position limit; refuses values below 1."""
    budget = model_position_limit(adapter) if max_prompt_tokens is None else int(max_prompt_tokens)
    if budget < 1:
        raise ParameterError(f"max_prompt_tokens must be >= 1, got {budget}")
    return budget


def prompt_length(adapter: ModelAdapter, prompt: Prompt) -> int:
    """Tokens of the encoded prompt (images expanded to their tokens, as the model sees it)."""
    return int(adapter.encode([prompt])["input_ids"].shape[1])


def fit_demonstrations(
    adapter: ModelAdapter, demos: Sequence[Example], query: Example, *, budget: int
) -> int:
    """The largest ``k <= len(demos)`` with ``len(prompt(demos[:k], query)) <= budget``.

    Prompt length grows with ``k``, so a binary search needs ``log2(len(demos))`` encodings.

    Raises:
        ParameterError: even the zero-shot prompt exceeds the budget.
    """
    if prompt_length(adapter, Prompt(tuple(demos), query)) <= budget:
        return len(demos)
    low, high = 0, len(demos)  # low fits (checked below), high does not
    if prompt_length(adapter, Prompt((), query)) > budget:
        raise ParameterError(f"the query alone needs more than the {budget}-token context budget")
    while high - low > 1:
        middle = (low + high) // 2
        fits = prompt_length(adapter, Prompt(tuple(demos[:middle]), query)) <= budget
        low, high = (middle, high) if fits else (low, middle)
    return low


def fit_prompt(adapter: ModelAdapter, prompt: Prompt, *, max_prompt_tokens: int) -> Prompt | None:
    """``prompt`` cut by the public rule (module docstring), or None when its query alone is too long."""
    try:
        k = fit_demonstrations(adapter, prompt.demonstrations, prompt.query, budget=max_prompt_tokens)
    except ParameterError:
        return None
    return prompt if k == len(prompt.demonstrations) else Prompt(prompt.demonstrations[:k], prompt.query)


def encode_one_within(
    adapter: ModelAdapter, prompt: Prompt, *, max_prompt_tokens: int
) -> dict[str, torch.Tensor] | None:
    """Batch-of-one model inputs of ``prompt`` cut by the public rule, or None (dropped).

    One encoding when the prompt fits (the common case); the binary search only when it does not.
    """
    inputs = adapter.encode([prompt])
    if inputs["input_ids"].shape[1] <= max_prompt_tokens:
        return inputs
    fitted = fit_prompt(adapter, prompt, max_prompt_tokens=max_prompt_tokens)
    return None if fitted is None else adapter.encode([fitted])


def encode_padded_within(
    adapter: ModelAdapter, prompt: Prompt, *, max_prompt_tokens: int
) -> dict[str, torch.Tensor] | None:
    """Batch-of-one model inputs of ``prompt`` cut by the public rule and left-padded to exactly
    ``max_prompt_tokens`` tokens, or None (dropped): the fixed public shape of a private pass.

    The same rule as :func:`encode_one_within` (the cut depends on the prompt's own length only);
    the padding only fills the budget, so the shape is the budget's, never the prompt's."""
    inputs = adapter.encode([prompt], pad_to=max_prompt_tokens)
    if inputs["input_ids"].shape[1] <= max_prompt_tokens:
        return inputs
    fitted = fit_prompt(adapter, prompt, max_prompt_tokens=max_prompt_tokens)
    return None if fitted is None else adapter.encode([fitted], pad_to=max_prompt_tokens)
