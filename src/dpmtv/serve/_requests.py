"""The chat-completion request: OpenAI's schema (pydantic at the edge), turned into one
zero-shot query for a vector or the bare model."""

from __future__ import annotations

import json
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from dpmtv.prompts import Example
from dpmtv.serve._errors import ApiError
from dpmtv.serve._generation import RowRequest
from dpmtv.serve._images import image_from_data_url
from dpmtv.serve._served import ServedModel
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


class ChatRequest(BaseModel):
    """Fields clients commonly send but that do not apply here (``user``, ``stream_options``...)
    are ignored; fields that would change the answer are checked."""

    model_config = ConfigDict(extra="ignore")

    model: str
    messages: list[_Message] = Field(min_length=1)
    max_tokens: int | None = None
    max_completion_tokens: int | None = None
    temperature: float | None = None
    top_p: float | None = None
    n: int | None = None
    stream: bool = False


def parse_chat_request(body: bytes) -> ChatRequest:
    try:
        raw = json.loads(body)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ApiError(400, f"request body is not valid JSON: {exc}", code="invalid_json") from None
    try:
        return ChatRequest.model_validate(raw)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(part) for part in first["loc"])
        raise ApiError(
            400, f"invalid request: {where}: {first['msg']}", code="invalid_request", param=where or None
        ) from None


def row_request(request: ChatRequest, served: ServedModel, settings: ServeSettings) -> RowRequest:
    """Check the sampling parameters and the model name, decode the images, build the query."""
    vector = _served_vector(request.model, served)
    return RowRequest(_example(request, settings), vector, _max_new_tokens(request, settings))


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
    if requested is None:
        return settings.default_max_tokens
    if not 1 <= requested <= settings.max_tokens:
        raise ApiError(
            400,
            f"max_tokens must be in [1, {settings.max_tokens}] (--max-tokens), got {requested}",
            code="max_tokens_out_of_range",
            param="max_tokens",
        )
    return requested


def _example(request: ChatRequest, settings: ServeSettings) -> Example:
    """One user message → one zero-shot query: its text parts joined, its images in order."""
    if len(request.messages) != 1 or request.messages[0].role != "user":
        roles = [message.role for message in request.messages]
        raise ApiError(
            400,
            f"send exactly one message with role 'user' (one zero-shot query per request), got roles {roles}",
            code="unsupported_messages",
            param="messages",
        )
    content = request.messages[0].content
    parts: list[Any] = (
        [_TextPart(type="text", text=content)] if isinstance(content, str) else list(content or [])
    )
    texts = [part.text for part in parts if isinstance(part, _TextPart)]
    urls = [(i, part.image_url.url) for i, part in enumerate(parts) if isinstance(part, _ImagePart)]
    question = "\n".join(texts)
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
    if not question and not urls:
        raise ApiError(400, "the message has no text and no image", code="empty_message", param="messages")
    images = tuple(
        image_from_data_url(url, max_pixels=settings.max_image_pixels, param=f"messages.0.content.{i}")
        for i, url in urls
    )
    return Example(images, question)
