"""Inference with a released task vector: every query is post-processing, at no privacy cost."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager, nullcontext

import torch

from dpmtv.errors import ParameterError
from dpmtv.extract import iter_batches
from dpmtv.hooks import PatchMode, overwrite_heads
from dpmtv.models.base import ModelAdapter
from dpmtv.models.fingerprint import model_identity
from dpmtv.models.loading import LoadedModel
from dpmtv.prompts import Example, zero_shot
from dpmtv.vector import TaskVector


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
    with overwrite_heads(adapter, vector.layer_patches(), mode=PatchMode(mode)):
        yield adapter


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
    if max_new_tokens < 1:
        raise ParameterError(f"max_new_tokens must be >= 1, got {max_new_tokens}")
    answers: list[str] = []
    patched = nullcontext() if vector is None else apply(loaded, vector, mode=mode)
    with patched:
        for batch in iter_batches(list(queries), batch_size):
            prompts = [zero_shot(query) for query in batch]
            answers.extend(_generate(loaded.adapter, prompts, max_new_tokens))
    return answers


def _generate(adapter: ModelAdapter, prompts, max_new_tokens: int) -> list[str]:
    return [text.strip() for text in generate_texts(adapter, prompts, max_new_tokens=max_new_tokens)]


def greedy_new_tokens(
    model, inputs, *, pad_token_id: int | None, max_new_tokens: int, stopping_criteria=None
) -> torch.Tensor:
    """Greedy decoding of encoded, left-padded prompts (every row's prompt ends at the same
    column): the new tokens ``(B, new)``. The one generation call of answering, evaluation and
    serving; ``stopping_criteria`` (serving's per-row limits and streaming) is passed through."""
    extra = {} if stopping_criteria is None else {"stopping_criteria": stopping_criteria}
    with torch.no_grad():
        output = model.generate(
            **inputs, max_new_tokens=max_new_tokens, do_sample=False, pad_token_id=pad_token_id, **extra
        )
    return output[:, inputs["input_ids"].shape[1] :]


def generate_texts(adapter: ModelAdapter, prompts, *, max_new_tokens: int) -> list[str]:
    """Greedy answers to ``prompts`` in one batch, decoded without special tokens (uncleaned)."""
    inputs = adapter.encode(prompts)
    tokenizer = adapter.tokenizer
    new_tokens = greedy_new_tokens(
        adapter.model, inputs, pad_token_id=tokenizer.pad_token_id, max_new_tokens=max_new_tokens
    )
    return tokenizer.batch_decode(new_tokens, skip_special_tokens=True)
