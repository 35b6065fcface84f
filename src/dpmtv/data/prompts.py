"""Prompt content: demonstrations and a query, independent of any model family.

A :class:`Prompt` is what one chunk (or one inference query) renders to. How it becomes tokens is
the model adapter's job (``ModelAdapter.encode``): by default through the checkpoint's own chat
template, as a conversation of alternating user (image(s) + question) and assistant (answer)
turns ending with the query's user turn and the generation prompt.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from PIL import Image

from dpmtv.data.records import Record
from dpmtv.errors import ParameterError

# The public question of a data-free query (a blank or public image) when none is given.
DEFAULT_QUERY_QUESTION = "What is the answer?"


@dataclass(frozen=True)
class Example:
    """One image+text example; ``answer`` is ``None`` for a query."""

    images: tuple[Image.Image, ...]
    question: str
    answer: str | None = None


@dataclass(frozen=True)
class Prompt:
    """Many-shot prompt: demonstrations, then one query whose answer the model must produce."""

    demonstrations: tuple[Example, ...]
    query: Example

    def all_images(self) -> list[Image.Image]:
        """Every image of the prompt in order: the demonstrations' images, then the query's."""
        return [im for ex in (*self.demonstrations, self.query) for im in ex.images]


def chat_messages(prompt: Prompt) -> list[dict[str, Any]]:
    """The prompt as chat messages in the structure transformers' chat templates expect."""
    messages: list[dict[str, Any]] = []
    for demo in prompt.demonstrations:
        messages.append(_user_turn(demo))
        messages.append({"role": "assistant", "content": [{"type": "text", "text": demo.answer}]})
    messages.append(_user_turn(prompt.query))
    return messages


def _user_turn(example: Example) -> dict[str, Any]:
    content: list[dict[str, Any]] = [{"type": "image"} for _ in example.images]
    content.append({"type": "text", "text": example.question})
    return {"role": "user", "content": content}


def zero_shot(query: Example) -> Prompt:
    return Prompt(demonstrations=(), query=query)


def zero_shot_prompts(records: Sequence[Record]) -> list[Prompt]:
    """Each record's images and question as a prompt without demonstrations."""
    return [zero_shot(Example(record.load_images(), record.question)) for record in records]


def blank_image(size: tuple[int, int] = (32, 32)) -> Image.Image:
    """A data-free grey image, used for data-free queries and references."""
    return Image.new("RGB", size, (127, 127, 127))


def chunk_prompt(chunk: Sequence[Record], *, query: str, query_question: str) -> Prompt:
    """One chunk's prompt: its records as demonstrations, then the query (docs/design.md §2)."""
    if query == "record":
        *demos, last = chunk
        query_example = Example(last.load_images(), last.question)
    else:
        demos = list(chunk)
        query_example = Example((public_query_image(query),), query_question)
    return Prompt(tuple(Example(r.load_images(), r.question, r.answer) for r in demos), query_example)


def public_query_image(query: str) -> Image.Image:
    if query == "blank":
        return blank_image()
    try:
        with Image.open(Path(query)) as image:
            return image.convert("RGB")
    except OSError as exc:
        raise ParameterError(
            f"--query '{query}' is neither 'record', 'blank' nor a readable image: {exc}"
        ) from None
