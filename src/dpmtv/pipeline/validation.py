"""The build's one validation pass: everything that can be checked per record, checked before the
ledger charge and before any private forward pass (docs/design.md §2, "Validation before the
charge").

Whether an artifact appears must not depend on one record once the build has started its private
computation: a record that would make its chunk fail mid-build would otherwise decide, after the
charge, whether the build ends with an artifact. So every check that one record can fail on its
own runs here, over all records, and a failure refuses the build — nothing charged, nothing
computed privately — with a message naming the file, line and field (the operator's own data,
before the charge). What can only fail during private computation follows the public rule of
:mod:`dpmtv.forward.failed_chunks` instead.

Per record:

* ``answer`` is not blank after normalisation (whitespace stripped); with private head selection,
  where any record may be its chunk's held-out query, the answer must also have a first token
  (:func:`dpmtv.selection._data.first_answer_token`);
* the images are readable — the file exists, a format reads its header, the size is within the
  decompression-bomb limit and the file's checksums hold where the format has them (PNG) — and
  the model's processor accepts the record's own prompt (the real processor, called on blank
  stand-ins of the images' sizes: what it computes and refuses depends on sizes, not pixels, e.g.
  Qwen2-VL refuses an aspect ratio of 200 or more; one call per distinct sizes and text).
  No pixel is decoded here: each image is decoded once, by the extraction. An image whose pixel
  data is damaged behind valid checksums fails only there, after the charge, and its chunk
  contributes zero by the public rule of :mod:`dpmtv.forward.failed_chunks`, as a file that
  changes after this pass does;
* with ``--query record`` (any record may be a query), the record's query alone fits the public
  token budget, so the prompt-length rule never has to drop a chunk for its query.

Once per build (public inputs only): the model runs a data-free prompt through the release
extraction and gives finite values, so a model or dtype that fails on every prompt is refused
before the charge rather than turning every chunk into a zero vector after it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np
from PIL import Image

from dpmtv.data.prompts import Example, Prompt, blank_image, public_query_image, zero_shot
from dpmtv.data.records import Record
from dpmtv.errors import ModelError, NumericalError, ParameterError, RecordError
from dpmtv.forward.extract import selected_heads_of
from dpmtv.forward.prompt_budget import prompt_length, resolve_max_prompt_tokens
from dpmtv.heads import HeadSet
from dpmtv.models.base import ModelAdapter
from dpmtv.selection._data import first_answer_token

if TYPE_CHECKING:
    from dpmtv.pipeline.settings import BuildSettings

__all__ = ["check_model_on_public_prompt", "validate_build_inputs", "validate_records_for_build"]


def validate_build_inputs(
    adapter: ModelAdapter, records: Sequence[Record], heads: HeadSet, settings: BuildSettings
) -> None:
    """The validation pass of a build with ``settings`` (its budget resolved): every record, then
    the model on a data-free prompt over ``heads`` (the released heads, or the selection pool)."""
    budget = resolve_max_prompt_tokens(adapter, settings.max_prompt_tokens)  # resolved: unchanged
    validate_records_for_build(
        adapter,
        records,
        query=settings.query_source,
        query_question=settings.query_question,
        max_prompt_tokens=budget,
        private_selection=settings.private_selection is not None,
    )
    check_model_on_public_prompt(adapter, heads, query_question=settings.query_question)


def validate_records_for_build(
    adapter: ModelAdapter,
    records: Sequence[Record],
    *,
    query: str,
    query_question: str,
    max_prompt_tokens: int,
    private_selection: bool,
) -> None:
    """Refuse the first record that would fail on its own during the build (module docstring).

    ``query``: the build's query source ("record", "blank" or a public image path) and
    ``query_question`` its public question; ``max_prompt_tokens``: the resolved public budget.

    Raises:
        RecordError: names the record's file:line, the field and the value or the limit.
        ParameterError: a public query that alone exceeds the budget.
    """
    public_query = (
        None if query == "record" else _public_query(query, query_question, max_prompt_tokens, adapter)
    )
    stand_ins = _StandIns()
    lengths: dict[tuple[object, ...], int] = {}  # equal sizes and text: equal tokens
    for record in records:
        sizes = record.image_sizes()  # RecordError (file:line, field) for an unreadable image
        images = stand_ins.of(sizes)
        _check_answer(adapter, record, images, private_selection=private_selection)
        key = (sizes, record.question, None if public_query is None else record.answer)
        if key not in lengths:
            lengths[key] = _processed_length(adapter, record, _own_prompt(record, images, public_query))
        if public_query is None and lengths[key] > max_prompt_tokens:
            raise RecordError(
                f"{record.where}: fields 'image' and 'question': the record as its chunk's query "
                f"needs {lengths[key]} tokens, over the {max_prompt_tokens}-token budget "
                "(--max-prompt-tokens); shorten the question, use a smaller image or raise the budget"
            )


class _StandIns:
    """Blank RGB images of given sizes, one per size, standing for a record's images: what the
    processor computes from an image (its resizing, tiling and token count, and its refusals,
    such as Qwen2-VL's of an aspect ratio of 200 or more) depends on the image's size, not on
    its pixels, so the validation pass needs no pixel decoded."""

    def __init__(self) -> None:
        self._images: dict[tuple[int, int], Image.Image] = {}

    def of(self, sizes: tuple[tuple[int, int], ...]) -> tuple[Image.Image, ...]:
        return tuple(self._images.setdefault(size, Image.new("RGB", size)) for size in sizes)


def check_model_on_public_prompt(adapter: ModelAdapter, heads: HeadSet, *, query_question: str) -> None:
    """One forward pass on a data-free prompt (blank image, public question) through the release
    extraction; refuse a model whose captured heads are not finite even there.

    Raises:
        ModelError: the pass raised.
        NumericalError: it gave NaN/inf values (names the layer and the dtype to try).
    """
    prompt = zero_shot(Example((blank_image(),), query_question))
    try:
        values = selected_heads_of(adapter, adapter.encode([prompt]), heads)
    except Exception as exc:  # any failure here is the model's, not a record's
        raise ModelError(f"the model fails on a data-free prompt before any private record: {exc}") from exc
    bad = [layer for layer, rows in values.items() if not np.isfinite(rows).all()]
    if bad:
        raise NumericalError(
            f"layer {bad[0]}: the model gives NaN or inf head outputs on a data-free prompt, before "
            "any private record; check the model's dtype (try --dtype float32)"
        )


def _check_answer(
    adapter: ModelAdapter, record: Record, images: tuple[Image.Image, ...], *, private_selection: bool
) -> None:
    if not record.answer.strip():
        raise RecordError(
            f"{record.where}: field 'answer' is blank ({record.answer!r}); every record needs an answer"
        )
    if private_selection:  # the held-out query of private selection's vote (selection.private)
        try:
            first_answer_token(adapter, zero_shot(Example(images, record.question)), record.answer)
        except RecordError:
            raise RecordError(
                f"{record.where}: field 'answer' ({record.answer!r}) has no token the model could "
                "be scored on; write a non-blank answer"
            ) from None


def _own_prompt(record: Record, images: tuple[Image.Image, ...], public_query: Example | None) -> Prompt:
    """The record as the build may render it: its chunk's query, or a demonstration before the
    public query."""
    if public_query is None:
        return zero_shot(Example(images, record.question))
    return Prompt((Example(images, record.question, record.answer),), public_query)


def _processed_length(adapter: ModelAdapter, record: Record, prompt: Prompt) -> int:
    """Tokens of ``prompt`` through the real processor; its refusal names the record's images."""
    try:
        return prompt_length(adapter, prompt)
    except Exception as exc:  # before the charge: any refusal of one record's prompt is reported
        sizes = ", ".join(f"{image.width}×{image.height} px" for image in prompt.all_images())
        raise RecordError(
            f"{record.where}: field 'image': the model's processor refuses the record's image(s) "
            f"({sizes}): {exc}"
        ) from None


def _public_query(query: str, question: str, max_prompt_tokens: int, adapter: ModelAdapter) -> Example:
    """The public query of ``--query blank|IMAGE``; refused when it alone exceeds the budget."""
    example = Example((public_query_image(query),), question)
    length = prompt_length(adapter, zero_shot(example))
    if length > max_prompt_tokens:
        raise ParameterError(
            f"the public query alone needs {length} tokens, over the {max_prompt_tokens}-token "
            "budget (--max-prompt-tokens): every chunk would be dropped"
        )
    return example
