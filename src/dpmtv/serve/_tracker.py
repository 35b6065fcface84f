"""Each row's new tokens during generation: its text, stop strings, log-probabilities, streaming.

A stopping criterion called after every token: a row stops on its own ``max_new_tokens``, an end
token, a stop string, or when its client has gone. Stop strings are matched in the decoded text,
so a stop that spans several tokens is found; the answer ends before it. A streaming row sends
only text that can no longer become part of a stop match (the longest end of the text that
begins a stop string is held back), and never half a character. Each sent piece carries the
log-probability entries of the tokens whose text it completes.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from transformers import StoppingCriteria

from dpmtv.serve._decoding import Decoding, RowDecoding


@dataclass(frozen=True)
class TokenLogprob:
    token: str
    logprob: float | None  # None: a prompt's first token, which nothing predicts
    top: tuple[tuple[str, float], ...]  # the most likely tokens at this step, best first

    def openai(self) -> dict[str, Any]:
        """OpenAI's entry: token, logprob, UTF-8 bytes and top_logprobs."""
        return {
            **_entry(self.token, self.logprob),
            "top_logprobs": [_entry(token, logprob) for token, logprob in self.top],
        }


def _entry(token: str, logprob: float | None) -> dict[str, Any]:
    return {"token": token, "logprob": logprob, "bytes": list(token.encode("utf-8"))}


CONTEXT_TOKENS = 6  # tokens before one that name it: a word's space, or a character's other bytes

OnText = Callable[[int, str, list[TokenLogprob]], None]  # (row, new text, its tokens' log-probabilities)
OnFirstToken = Callable[[int], None]  # (row)


@dataclass
class _Row:
    limit: int
    cancelled: threading.Event
    stops: tuple[str, ...]
    decoding: Decoding
    streaming: bool
    raw: bool  # a text completion: its text is kept as decoded (a chat answer is stripped)
    tokens: list[int]
    logprobs: list[TokenLogprob]
    ends: list[int]  # the text's length after each token (rows that decode as they go)
    finish_reason: str = "length"
    done: bool = False
    text: str | None = None  # the answer once cut at a stop string
    sent: int = 0  # characters streamed
    sent_tokens: int = 0  # log-probability entries streamed

    @property
    def decodes_as_it_goes(self) -> bool:
        return self.streaming or bool(self.stops)


class RowTracker(StoppingCriteria):
    def __init__(
        self,
        tokenizer: Any,
        rows: Sequence[tuple[int, threading.Event, tuple[str, ...], Decoding, bool, bool]],
        eos_ids: list[int],
        decoding: RowDecoding,
        on_text: OnText | None,
        on_first_token: OnFirstToken | None,
    ) -> None:
        self.tokenizer = tokenizer
        self.rows = [_Row(*row, tokens=[], logprobs=[], ends=[]) for row in rows]
        self.eos_ids = set(eos_ids)
        self.decoding = decoding
        self.on_text = on_text
        self.on_first_token = on_first_token

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor, **kwargs: Any) -> torch.Tensor:
        newest = input_ids[:, -1].tolist()
        for index, (row, token) in enumerate(zip(self.rows, newest, strict=True)):
            if row.done:
                continue
            if row.limit == 0:  # echo only: nothing generated
                row.done = True
                continue
            if row.cancelled.is_set():
                row.done, row.finish_reason = True, "cancelled"
                continue
            if token in self.eos_ids:
                row.done, row.finish_reason = True, "stop"
                continue
            self._append(index, row, token)
            if len(row.tokens) >= row.limit:
                row.done = True
        return torch.tensor([row.done for row in self.rows], dtype=torch.bool, device=input_ids.device)

    def _append(self, index: int, row: _Row, token: int) -> None:
        row.tokens.append(token)
        if row.decoding.logprobs:
            row.logprobs.append(self._logprob(index, token, row.decoding.top_logprobs))
        if len(row.tokens) == 1 and self.on_first_token is not None:
            self.on_first_token(index)
        if not row.decodes_as_it_goes:
            return
        text = self.tokenizer.decode(row.tokens, skip_special_tokens=True)
        text = text if row.raw else text.lstrip()
        row.ends.append(len(text))
        cut = _first_stop(text, row.stops)
        if cut is not None:
            row.done, row.finish_reason = True, "stop"
            row.text = text[:cut] if row.raw else text[:cut].rstrip()
            kept = sum(1 for start in [0, *row.ends[:-1]] if start < cut)
            del row.tokens[kept:], row.logprobs[kept:]
            return
        if row.streaming and self.on_text is not None:
            self._stream(index, row, text)

    def _logprob(self, index: int, token: int, top: int) -> TokenLogprob:
        logprobs = self.decoding.latest[index]
        assert logprobs is not None  # the decoding processor logs every row that asks
        row = self.rows[index]
        return self.entry(logprobs, token, top, context=row.tokens[-1 - CONTEXT_TOKENS : -1])

    def entry(
        self, logprobs: torch.Tensor, token: int, top: int, context: Sequence[int] = ()
    ) -> TokenLogprob:
        """``token``'s entry in one position's log-probabilities, with the ``top`` most likely;
        each named as it reads after ``context`` (:meth:`token_text`)."""
        best = torch.topk(logprobs, top) if top else None
        pairs = () if best is None else zip(best.indices.tolist(), best.values.tolist(), strict=True)
        before = self._decode(context)

        def name(candidate: int) -> str:
            return _after(before, self._decode([*context, candidate]))

        return TokenLogprob(name(token), float(logprobs[token]), tuple((name(i), v) for i, v in pairs))

    def token_text(self, token: int, context: Sequence[int] = ()) -> str:
        """A token's share of the text, after ``context`` (the tokens before it; a few suffice):
        decoding a token alone would drop a SentencePiece word's leading space, and the entries
        would not spell the answer as OpenAI's do. A special token, left out of the text, is empty."""
        return _after(self._decode(context), self._decode([*context, token]))

    def _decode(self, tokens: Sequence[int]) -> str:
        text: str = self.tokenizer.decode(list(tokens), skip_special_tokens=True)
        return text

    def _stream(self, index: int, row: _Row, text: str) -> None:
        ready = len(text) - _held_back(text, row.stops)
        # Byte-level tokenizers can produce a partial character; wait until the text extends.
        while ready > row.sent and text[ready - 1] == "\ufffd":
            ready -= 1
        if ready <= row.sent:
            return
        done_tokens = sum(1 for end in row.ends if end <= ready)
        entries = row.logprobs[row.sent_tokens : done_tokens] if row.decoding.logprobs else []
        self.on_text(index, text[row.sent : ready], entries)  # type: ignore[misc]
        row.sent, row.sent_tokens = ready, max(row.sent_tokens, done_tokens)

    def text(self, index: int) -> str:
        row = self.rows[index]
        if row.text is not None:
            return row.text
        text: str = self.tokenizer.decode(row.tokens, skip_special_tokens=True)
        return text if row.raw else text.strip()


def _after(before: str, text: str) -> str:
    """What ``text`` adds to ``before`` (from where they first differ: a character completed by
    the new token's bytes replaces the U+FFFD that stood for its first bytes)."""
    return text[len(os.path.commonprefix([before, text])) :]


def _first_stop(text: str, stops: tuple[str, ...]) -> int | None:
    found = [position for stop in stops if (position := text.find(stop)) >= 0]
    return min(found) if found else None


def _held_back(text: str, stops: tuple[str, ...]) -> int:
    """The length of the longest end of ``text`` that a stop string begins with."""
    longest = 0
    for stop in stops:
        for length in range(min(len(stop) - 1, len(text)), longest, -1):
            if stop.startswith(text[-length:]):
                longest = length
                break
    return longest
