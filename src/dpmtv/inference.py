"""Inference with a released task vector: every query is post-processing, at no privacy cost."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager, nullcontext

import torch
from transformers import LogitsProcessor, LogitsProcessorList

from dpmtv.artifact.vector import TaskVector
from dpmtv.data.prompts import Example, Prompt, zero_shot
from dpmtv.errors import ParameterError
from dpmtv.forward.extract import iter_batches
from dpmtv.forward.hooks import LayerPatch, PatchMode, layer_patches, overwrite_heads
from dpmtv.models.base import ModelAdapter
from dpmtv.models.fingerprint import model_identity
from dpmtv.models.loading import LoadedModel


@contextmanager
def apply(
    model: LoadedModel | ModelAdapter, vector: TaskVector, *, mode: PatchMode | str | None = None
) -> Iterator[ModelAdapter]:
    """Overwrite the vector's heads at the last position of every forward call inside the block.

    ``mode=None`` takes the checkpoint's recommended mode (``LoadedModel.patch_mode``), else
    every-call. Refuses a model whose identity differs from the one the vector was built for. Hooks are
    removed on exit, also when the block raises.
    """
    adapter = model.adapter if isinstance(model, LoadedModel) else model
    name = (
        model.name_or_path
        if isinstance(model, LoadedModel)
        else vector.metadata.model.get("name_or_path", "")
    )
    vector.check_model(model_identity(adapter, name))
    if mode is None:
        mode = model.patch_mode if isinstance(model, LoadedModel) else PatchMode.EVERY_CALL
    with overwrite_heads(adapter, vector_patches(vector), mode=PatchMode(mode)):
        yield adapter


def vector_patches(vector: TaskVector) -> dict[int, LayerPatch]:
    """Per-layer overwrite values for :func:`~dpmtv.forward.hooks.overwrite_heads`: the vector's
    rows through :func:`~dpmtv.forward.hooks.layer_patches`, the one conversion."""
    return layer_patches(vector.rows_per_layer(), vector.heads)


def answer_queries(
    loaded: LoadedModel,
    queries: Sequence[Example],
    *,
    vector: TaskVector | None = None,
    max_new_tokens: int = 16,
    batch_size: int = 8,
    mode: PatchMode | str | None = None,
) -> list[str]:
    """Greedy zero-shot answers, with the vector applied when one is given."""
    batches = encode_queries(loaded.adapter, queries, batch_size=batch_size)
    return answer_encoded(loaded, batches, vector=vector, max_new_tokens=max_new_tokens, mode=mode)


Inputs = Mapping[str, torch.Tensor]


def encode_queries(adapter: ModelAdapter, queries: Sequence[Example], *, batch_size: int) -> list[Inputs]:
    """The zero-shot prompts of ``queries``, encoded ``batch_size`` per batch: what
    :func:`answer_encoded` answers. Encoding never reads the model, so one list can be answered
    with several vectors (evaluation answers the same queries once per method)."""
    return [
        adapter.encode([zero_shot(query) for query in batch])
        for batch in iter_batches(list(queries), batch_size)
    ]


def answer_encoded(
    loaded: LoadedModel,
    batches: Sequence[Inputs],
    *,
    vector: TaskVector | None = None,
    max_new_tokens: int = 16,
    mode: PatchMode | str | None = None,
) -> list[str]:
    """Greedy answers to encoded ``batches`` (:func:`encode_queries`), stripped, with the vector
    applied when one is given."""
    if max_new_tokens < 1:
        raise ParameterError(f"max_new_tokens must be >= 1, got {max_new_tokens}")
    answers: list[str] = []
    patched = nullcontext() if vector is None else apply(loaded, vector, mode=mode)
    with patched:
        for inputs in batches:
            texts = generate_encoded(loaded.adapter, inputs, max_new_tokens=max_new_tokens)
            answers.extend(text.strip() for text in texts)
    return answers


def greedy_new_tokens(
    model,
    inputs,
    *,
    pad_token_id: int | None,
    max_new_tokens: int,
    stopping_criteria=None,
    logits_processor=None,
) -> torch.Tensor:
    """Greedy decoding of encoded, left-padded prompts (every row's prompt ends at the same
    column): the new tokens ``(B, new)``. The one generation call of answering, evaluation and
    serving; ``stopping_criteria`` (serving's per-row limits and streaming) and
    ``logits_processor`` (per-row sampling and scoring) are passed through."""
    extra = {} if stopping_criteria is None else {"stopping_criteria": stopping_criteria}
    if logits_processor is not None:
        extra["logits_processor"] = logits_processor
    with torch.no_grad():
        output = model.generate(
            **inputs, max_new_tokens=max_new_tokens, do_sample=False, pad_token_id=pad_token_id, **extra
        )
    return output[:, inputs["input_ids"].shape[1] :]


def generate_texts(adapter: ModelAdapter, prompts, *, max_new_tokens: int) -> list[str]:
    """Greedy answers to ``prompts`` in one batch, decoded without special tokens (uncleaned)."""
    return generate_encoded(adapter, adapter.encode(prompts), max_new_tokens=max_new_tokens)


def generate_encoded(adapter: ModelAdapter, inputs: Inputs, *, max_new_tokens: int) -> list[str]:
    """Greedy answers to one encoded batch, decoded without special tokens (uncleaned)."""
    tokenizer = adapter.tokenizer
    new_tokens = greedy_new_tokens(
        adapter.model, inputs, pad_token_id=tokenizer.pad_token_id, max_new_tokens=max_new_tokens
    )
    return tokenizer.batch_decode(new_tokens, skip_special_tokens=True)


def choice_probabilities(
    loaded: LoadedModel,
    queries: Sequence[Example | Prompt],
    choices: Sequence[str],
    *,
    vector: TaskVector | None = None,
    batch_size: int = 8,
    mode: PatchMode | str | None = None,
) -> list[dict[str, float]]:
    """Each query's probability of each choice under the vector, normalised over the choices.
    A query is an example (asked zero-shot) or a whole conversation (a :class:`Prompt`).

    A choice is scored exactly as the model would generate it: its tokens (the tokenizer's
    encoding of the choice text alone) are forced one by one through the same ``generate`` call
    as answering, with the vector patched as in answering, and its log-probability is the sum of
    the model's log-probabilities of those tokens. Post-processing of the released vector: no
    privacy cost.
    """
    if len(set(choices)) < 2 or any(not choice for choice in choices):
        raise ParameterError(f"give at least two distinct non-empty choices, got {list(choices)}")
    tokenizer = loaded.adapter.tokenizer
    forced = [tuple(tokenizer(choice, add_special_tokens=False)["input_ids"]) for choice in choices]
    # one-token choices are all read from each query's first distribution: one row per query
    single = all(len(tokens) == 1 for tokens in forced)
    rows = [(query, ()) for query in queries] if single else [(q, t) for q in queries for t in forced]
    totals: list[float] = []
    patched = nullcontext() if vector is None else apply(loaded, vector, mode=mode)
    with patched:
        for batch in iter_batches(rows, batch_size):
            prompts = [query if isinstance(query, Prompt) else zero_shot(query) for query, _ in batch]
            inputs = loaded.adapter.encode(prompts)
            scorer = (
                _FirstTokens([tokens[0] for tokens in forced])
                if single
                else _ForcedTokens([tokens for _, tokens in batch], inputs["input_ids"].shape[1])
            )
            greedy_new_tokens(
                loaded.model,
                inputs,
                pad_token_id=tokenizer.pad_token_id,
                max_new_tokens=max(1, *(len(tokens) for _, tokens in batch)),
                logits_processor=LogitsProcessorList([scorer]),
            )
            totals.extend(scorer.totals)
    results = []
    for start in range(0, len(totals), len(choices)):
        probabilities = torch.softmax(
            torch.tensor(totals[start : start + len(choices)], dtype=torch.float64), 0
        )
        results.append(dict(zip(choices, probabilities.tolist(), strict=True)))
    return results


class _ForcedTokens(LogitsProcessor):
    """Forces each row's tokens in turn and sums their log-probabilities under the raw scores."""

    def __init__(self, forced: Sequence[tuple[int, ...]], prompt_length: int) -> None:
        self.forced = list(forced)
        self.prompt_length = prompt_length
        self.totals = [0.0 for _ in forced]

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        step = input_ids.shape[1] - self.prompt_length
        logprobs = torch.log_softmax(scores.float(), dim=-1)
        kept = torch.full_like(scores, float("-inf"))
        for row, tokens in enumerate(self.forced):
            token = tokens[min(step, len(tokens) - 1)]
            if step < len(tokens):
                self.totals[row] += float(logprobs[row, token])
            kept[row, token] = 0.0
        return kept


class _FirstTokens(LogitsProcessor):
    """Reads every row's log-probabilities of the one-token choices at the first step."""

    def __init__(self, tokens: Sequence[int]) -> None:
        self.tokens = list(tokens)
        self.totals: list[float] = []

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        if not self.totals:  # the first step: the only one generate runs (max_new_tokens 1)
            logprobs = torch.log_softmax(scores.float(), dim=-1)[:, self.tokens]
            self.totals = logprobs.flatten().tolist()
        return scores
