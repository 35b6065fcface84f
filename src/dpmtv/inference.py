"""Inference with a released task vector: every query is post-processing, at no privacy cost."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager, nullcontext

import torch

from dpmtv.artifact.vector import TaskVector
from dpmtv.data.prompts import Example, zero_shot
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
    return generate_encoded(adapter, adapter.encode(prompts), max_new_tokens=max_new_tokens)


def generate_encoded(adapter: ModelAdapter, inputs: Inputs, *, max_new_tokens: int) -> list[str]:
    """Greedy answers to one encoded batch, decoded without special tokens (uncleaned)."""
    tokenizer = adapter.tokenizer
    new_tokens = greedy_new_tokens(
        adapter.model, inputs, pad_token_id=tokenizer.pad_token_id, max_new_tokens=max_new_tokens
    )
    return tokenizer.batch_decode(new_tokens, skip_special_tokens=True)
