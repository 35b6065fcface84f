"""The chat-completion request: OpenAI's schema (pydantic at the edge), every field honoured or
refused (:mod:`dpmtv.serve._fields`), turned into rows for a vector or the bare model: one
conversation, ``n`` choices, each with its own decoding."""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any, TypeVar

from pydantic import BaseModel, Field, ValidationError

from dpmtv.serve._body import MAX_INT_DIGITS, is_huge_integer, parse_json_body
from dpmtv.serve._decoding import Decoding
from dpmtv.serve._errors import ApiError
from dpmtv.serve._fields import check_fields
from dpmtv.serve._generation import RowRequest
from dpmtv.serve._messages import Message, PlannedTurn, decoded_prompt, plan_turns
from dpmtv.serve._options import SamplingFields, check_top_logprobs, max_new_tokens, served_vector
from dpmtv.serve._served import ServedModel, ServedVector
from dpmtv.serve._settings import ServeSettings

M = TypeVar("M", bound=BaseModel)


class ChatRequest(SamplingFields):
    messages: list[Message] = Field(min_length=1)
    max_completion_tokens: int | None = None
    logprobs: bool = False
    top_logprobs: int | None = None


@dataclass(frozen=True)
class PlannedRow:
    """A checked request before its pixels are decoded: admission control reads ``pixels``."""

    turns: tuple[PlannedTurn, ...]
    vector: ServedVector | None
    max_new_tokens: int
    decodings: tuple[Decoding, ...]  # one per choice
    stop: tuple[str, ...]

    @property
    def pixels(self) -> int:
        return sum(image.pixels for turn in self.turns for image in turn.images)


def parse_chat_request(body: bytes) -> ChatRequest:
    return validated(ChatRequest, check_fields(parse_json_body(body), endpoint="chat"))


def validated(schema: type[M], raw: dict[str, Any]) -> M:
    try:
        return schema.model_validate(raw)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(part) for part in first["loc"])
        message = first["msg"]
        if is_huge_integer(first.get("input")):
            message = f"an integer of more than {MAX_INT_DIGITS} digits"
        raise ApiError(
            400, f"invalid request: {where}: {message}", code="invalid_request", param=where or None
        ) from None


def plan_row(request: ChatRequest, served: ServedModel, settings: ServeSettings) -> PlannedRow:
    """Check the sampling parameters, the model name and the images' headers (no pixels yet)."""
    vector = served_vector(request.model, served)
    if request.top_logprobs is not None:
        check_top_logprobs(request.top_logprobs)
        if not request.logprobs:
            raise ApiError(
                400, "top_logprobs needs logprobs=true", code="invalid_logprobs", param="top_logprobs"
            )
    request.check_stream_options()
    if request.stream and request.n > 1:
        raise ApiError(400, "n > 1 cannot stream: ask without stream", code="unsupported_n", param="n")
    field = "max_completion_tokens" if request.max_completion_tokens is not None else "max_tokens"
    new_tokens = max_new_tokens(
        request.max_completion_tokens if request.max_completion_tokens is not None else request.max_tokens,
        field,
        default=settings.default_max_tokens,
        cap=settings.max_tokens,
    )
    top = (request.top_logprobs or 0) if request.logprobs else None
    vocab = vocab_size(served) if request.logit_bias else 0  # read only to check logit_bias
    decodings = request.decodings(vocab, top_logprobs=top)
    stop = request.stop_strings()
    return PlannedRow(plan_turns(request.messages, settings), vector, new_tokens, decodings, stop)


def row_requests(
    planned: PlannedRow, *, min_side: int, cancelled: threading.Event, stream: bool = False
) -> tuple[RowRequest, ...]:
    """Decode the images (reduced to ``min_side``): the slow step, run off the event loop. The
    choices share the decoded prompt and the client's ``cancelled`` event."""
    prompt = decoded_prompt(planned.turns, min_side=min_side)
    return tuple(
        RowRequest(
            prompt,
            planned.vector,
            planned.max_new_tokens,
            cancelled,
            stream=stream,
            decoding=decoding,
            stop=planned.stop,
        )
        for decoding in planned.decodings
    )


def vocab_size(served: ServedModel) -> int:
    """The token ids ``logit_bias`` may name: those the tokenizer and the model's head both know."""
    tokenizer_size = len(served.loaded.adapter.tokenizer)
    model: Any = served.loaded.model  # a transformers PreTrainedModel
    head = model.get_output_embeddings()
    return min(tokenizer_size, head.weight.shape[0]) if head is not None else tokenizer_size
