"""Chat messages → one conversation for the chat template, as the model's own processor takes it.

System (or developer) messages come first and are folded into the first user turn's text (as
chat templates without a system role do); then user and assistant turns alternate, ending with
a user turn. User turns may hold images, each turn's images placed before its text (dpmtv's
prompt layout, :func:`dpmtv.data.prompts.chat_messages`); assistant turns are text. The earlier
exchanges become the prompt's demonstrations and the last user turn its query, so the vector is
patched at the last token exactly as in a single-turn request.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from dpmtv.data.prompts import Example, Prompt
from dpmtv.serve._errors import ApiError
from dpmtv.serve._images import EncodedImage, decode_image, encoded_image
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


class Message(BaseModel):
    model_config = ConfigDict(extra="forbid")

    role: str
    content: str | list[Annotated[_TextPart | _ImagePart, Field(discriminator="type")]] | None = None


@dataclass(frozen=True)
class PlannedTurn:
    """A user turn (and the assistant's reply to it, ``None`` for the last) before decoding."""

    question: str
    images: tuple[EncodedImage, ...]
    answer: str | None


def plan_turns(messages: list[Message], settings: ServeSettings) -> tuple[PlannedTurn, ...]:
    roles = [message.role for message in messages]
    system = 0
    while system < len(messages) and roles[system] in ("system", "developer"):
        system += 1
    dialogue = roles[system:]
    expected = ["user" if i % 2 == 0 else "assistant" for i in range(len(dialogue))]
    if not dialogue or dialogue != expected or dialogue[-1] != "user":
        raise ApiError(
            400,
            "send system messages (optional), then user and assistant messages in turn, ending with a "
            f"user message, got roles {roles}",
            code="unsupported_messages",
            param="messages",
        )
    system_text = "\n\n".join(t for m in messages[:system] if (t := _parts(m, allow_images=False)[0]))
    parsed = []
    for start in range(system, len(messages), 2):
        text, urls = _parts(messages[start], allow_images=True)
        if start == system and system_text:
            text = f"{system_text}\n\n{text}" if text else system_text
        if not text and not urls:
            raise ApiError(
                400, f"message {start} has no text and no image", code="empty_message", param="messages"
            )
        answer = _parts(messages[start + 1], allow_images=False)[0] if start + 1 < len(messages) else None
        parsed.append((start, text, urls, answer))
    _check_counts([(text, urls, answer) for _, text, urls, answer in parsed], settings)
    turns = tuple(
        PlannedTurn(
            text,
            tuple(
                encoded_image(
                    url, max_pixels=settings.max_image_pixels, param=f"messages.{start}.content.{i}"
                )
                for i, url in urls
            ),
            answer,
        )
        for start, text, urls, answer in parsed
    )
    _check_pixels(turns, settings)
    return turns


def decoded_prompt(turns: tuple[PlannedTurn, ...], *, min_side: int) -> Prompt:
    """Decode the images (reduced to ``min_side``): the slow step, run off the event loop."""
    examples = [
        Example(
            tuple(decode_image(image, min_side=min_side) for image in turn.images), turn.question, turn.answer
        )
        for turn in turns
    ]
    return Prompt(tuple(examples[:-1]), examples[-1])


def _check_counts(
    turns: list[tuple[str, list[tuple[int, str]], str | None]], settings: ServeSettings
) -> None:
    characters = sum(len(text) + len(answer or "") for text, _, answer in turns)
    if characters > settings.max_question_chars:
        raise ApiError(
            400,
            f"the messages hold {characters} characters; the limit is {settings.max_question_chars}",
            code="question_too_long",
            param="messages",
        )
    images = sum(len(urls) for _, urls, _ in turns)
    if images > settings.max_images:
        raise ApiError(
            400,
            f"{images} images in one request; the limit is {settings.max_images} (--max-images)",
            code="too_many_images",
            param="messages",
        )


def _check_pixels(turns: tuple[PlannedTurn, ...], settings: ServeSettings) -> None:
    total = sum(image.pixels for turn in turns for image in turn.images)
    if total > settings.max_request_pixels:
        raise ApiError(
            400,
            f"the request's images hold {total} pixels together; the limit is {settings.max_request_pixels} "
            "(--max-request-pixels)",
            code="image_too_large",
            param="messages",
        )


def _parts(message: Message, *, allow_images: bool) -> tuple[str, list[tuple[int, str]]]:
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
