"""The chat-completion request: OpenAI's schema (pydantic at the edge), turned into one
zero-shot query for a vector or the bare model."""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from dpmtv.data.prompts import Example
from dpmtv.serve._body import MAX_INT_DIGITS, is_huge_integer, parse_json_body
from dpmtv.serve._errors import ApiError
from dpmtv.serve._generation import RowRequest
from dpmtv.serve._images import EncodedImage, decode_image, encoded_image
from dpmtv.serve._served import ServedModel, ServedVector
from dpmtv.serve._settings import ServeSettings


class _ImageURL(BaseModel):
    url: str
    detail: str | None = None


class _TextPart(BaseModel):
    type: Literal["text"]
    text: str


class _ImagePart(BaseModel):
    type: Literal["image_url"]
    image_url: _ImageURL


class _Message(BaseModel):
    role: str
    content: str | list[Annotated[_TextPart | _ImagePart, Field(discriminator="type")]] | None = None


class _StreamOptions(BaseModel):
    model_config = ConfigDict(extra="ignore")

    include_usage: bool = False


class ChatRequest(BaseModel):
    """Fields clients commonly send but that do not apply here (``user``, ``seed``...) are
    ignored; fields that would change the answer are checked."""

    model_config = ConfigDict(extra="ignore")

    model: str
    messages: list[_Message] = Field(min_length=1)
    max_tokens: int | None = None
    max_completion_tokens: int | None = None
    temperature: float | None = None
    top_p: float | None = None
    n: int | None = None
    stream: bool = False
    stream_options: _StreamOptions | None = None

    @property
    def include_usage(self) -> bool:
        return self.stream_options is not None and self.stream_options.include_usage


@dataclass(frozen=True)
class PlannedRow:
    """A checked request before its pixels are decoded: admission control reads ``pixels``."""

    question: str
    images: tuple[EncodedImage, ...]
    vector: ServedVector | None
    max_new_tokens: int

    @property
    def pixels(self) -> int:
        return sum(image.pixels for image in self.images)


def parse_chat_request(body: bytes) -> ChatRequest:
    raw = parse_json_body(body)
    try:
        return ChatRequest.model_validate(raw)
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
    vector = _served_vector(request.model, served)
    max_new_tokens = _max_new_tokens(request, settings)
    question, images = _query(request, settings)
    return PlannedRow(question, images, vector, max_new_tokens)


def row_request(
    planned: PlannedRow, *, min_side: int, cancelled: threading.Event, stream: bool = False
) -> RowRequest:
    """Decode the images (reduced to ``min_side``): the slow step, run off the event loop."""
    images = tuple(decode_image(image, min_side=min_side) for image in planned.images)
    example = Example(images, planned.question)
    return RowRequest(example, planned.vector, planned.max_new_tokens, cancelled, stream=stream)


def _served_vector(name: str, served: ServedModel):
    if name == served.name:
        return None
    if name not in served.vectors:
        raise ApiError(
            404,
            f"model '{name}' is not served here; choose one of: {', '.join(served.model_names)}",
            code="model_not_found",
            param="model",
        )
    return served.vectors[name]


def _max_new_tokens(request: ChatRequest, settings: ServeSettings) -> int:
    if request.temperature not in (None, 0, 0.0):
        raise ApiError(
            400,
            f"temperature must be 0 (answers are greedy), got {request.temperature}",
            code="unsupported_temperature",
            param="temperature",
        )
    if request.top_p not in (None, 1, 1.0):
        raise ApiError(
            400,
            f"top_p must be 1 (answers are greedy), got {request.top_p}",
            code="unsupported_top_p",
            param="top_p",
        )
    if request.n not in (None, 1):
        raise ApiError(400, f"n must be 1, got {request.n}", code="unsupported_n", param="n")
    requested = (
        request.max_completion_tokens if request.max_completion_tokens is not None else request.max_tokens
    )
    field = "max_completion_tokens" if request.max_completion_tokens is not None else "max_tokens"
    if requested is None:
        return settings.default_max_tokens
    if requested < 1:
        raise ApiError(
            400, f"{field} must be at least 1, got {requested}", code="max_tokens_out_of_range", param=field
        )
    # An upper bound, as in OpenAI's API: the server's cap (--max-tokens) cuts longer answers,
    # and a cut answer says so with finish_reason "length".
    return min(requested, settings.max_tokens)


def _query(request: ChatRequest, settings: ServeSettings) -> tuple[str, tuple[EncodedImage, ...]]:
    """System messages, then one user message → one zero-shot query: the system text folded in
    before the user's text (as chat templates without a system role do), the images in order."""
    *system, user = request.messages
    roles = [message.role for message in request.messages]
    if user.role != "user" or any(message.role not in ("system", "developer") for message in system):
        raise ApiError(
            400,
            "send system messages (optional) and then exactly one message with role 'user' (one zero-shot "
            f"query per request), got roles {roles}",
            code="unsupported_messages",
            param="messages",
        )
    system_texts = [_parts(message, allow_images=False)[0] for message in system]
    texts, urls = _parts(user, allow_images=True)
    question = "\n\n".join(text for text in [*system_texts, texts] if text)
    if len(question) > settings.max_question_chars:
        raise ApiError(
            400,
            f"the question has {len(question)} characters; the limit is {settings.max_question_chars}",
            code="question_too_long",
            param="messages",
        )
    if len(urls) > settings.max_images:
        raise ApiError(
            400,
            f"{len(urls)} images in one request; the limit is {settings.max_images} (--max-images)",
            code="too_many_images",
            param="messages",
        )
    if not texts and not urls:
        raise ApiError(400, "the message has no text and no image", code="empty_message", param="messages")
    index = len(request.messages) - 1
    images = tuple(
        encoded_image(url, max_pixels=settings.max_image_pixels, param=f"messages.{index}.content.{i}")
        for i, url in urls
    )
    total = sum(image.pixels for image in images)
    if total > settings.max_request_pixels:
        raise ApiError(
            400,
            f"the request's images hold {total} pixels together; the limit is {settings.max_request_pixels} "
            "(--max-request-pixels)",
            code="image_too_large",
            param="messages",
        )
    return question, images


def _parts(message: _Message, *, allow_images: bool) -> tuple[str, list[tuple[int, str]]]:
    content = message.content
    parts: list[Any] = (
        [_TextPart(type="text", text=content)] if isinstance(content, str) else list(content or [])
    )
    urls = [(i, part.image_url.url) for i, part in enumerate(parts) if isinstance(part, _ImagePart)]
    if urls and not allow_images:
        raise ApiError(
            400, f"a {message.role} message cannot hold images", code="unsupported_messages", param="messages"
        )
    return "\n".join(part.text for part in parts if isinstance(part, _TextPart)), urls
