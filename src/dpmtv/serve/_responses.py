"""OpenAI's response bodies for chat completions: whole, or as server-sent events."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import AsyncIterator, Sequence
from typing import Any

from dpmtv.serve._batcher import Job
from dpmtv.serve._generation import RowResult
from dpmtv.serve._metrics import Metrics
from dpmtv.serve._tracker import TokenLogprob


class ChatCompletion:
    """Response bodies for one completion id."""

    def __init__(self, model: str, *, logprobs: bool) -> None:
        self.id = f"chatcmpl-{uuid.uuid4().hex}"
        self.created = int(time.time())
        self.model = model
        self.logprobs = logprobs  # the client asked for them: each choice carries its tokens'

    def whole(self, results: Sequence[RowResult]) -> dict[str, Any]:
        return {
            "id": self.id,
            "object": "chat.completion",
            "created": self.created,
            "model": self.model,
            "system_fingerprint": None,
            "choices": [
                {
                    "index": index,
                    "message": {"role": "assistant", "content": result.text},
                    "finish_reason": result.finish_reason,
                    "logprobs": self._logprobs(result.logprobs),
                }
                for index, result in enumerate(results)
            ],
            "usage": usage(results),
        }

    def chunk(
        self, delta: dict[str, Any], finish_reason: str | None = None, logprobs: Sequence[TokenLogprob] = ()
    ) -> str:
        choice = {
            "index": 0,
            "delta": delta,
            "finish_reason": finish_reason,
            "logprobs": self._logprobs(logprobs)
            if "content" in delta and (delta["content"] or logprobs)
            else None,
        }
        return self._event([choice], None)

    def usage_chunk(self, usage: dict[str, Any]) -> str:
        return self._event([], usage)

    def _logprobs(self, entries: Sequence[TokenLogprob]) -> dict[str, Any] | None:
        if not self.logprobs:
            return None
        return {"content": [entry.openai() for entry in entries], "refusal": None}

    def _event(self, choices: list[dict[str, Any]], usage: dict[str, Any] | None) -> str:
        body = {
            "id": self.id,
            "object": "chat.completion.chunk",
            "created": self.created,
            "model": self.model,
            "system_fingerprint": None,
            "choices": choices,
            "usage": usage,
        }
        return f"data: {json.dumps(body)}\n\n"


async def stream_chat(
    job: Job, completion: ChatCompletion, metrics: Metrics, started: float, *, include_usage: bool
) -> AsyncIterator[str]:
    """Server-sent events: a role chunk, text deltas (with their tokens' log-probabilities) as
    tokens decode, the finish chunk, with ``stream_options.include_usage`` a usage chunk (no
    choices, as OpenAI sends it), [DONE]."""
    yield completion.chunk({"role": "assistant", "content": ""})
    sent, sent_tokens = "", 0
    while True:
        kind, payload = await job.events.get()
        if kind == "text":
            text, entries = payload
            sent += text
            sent_tokens += len(entries)
            yield completion.chunk({"content": text}, logprobs=entries)
        elif kind == "done":
            rest = payload.text[len(sent) :] if payload.text.startswith(sent) else ""
            entries = payload.logprobs[sent_tokens:]
            if rest or entries:
                yield completion.chunk({"content": rest}, logprobs=entries)
            metrics.observe_latency(job.model, time.perf_counter() - started)
            yield completion.chunk({}, payload.finish_reason)
            if include_usage:
                yield completion.usage_chunk(usage([payload]))
            break
        else:
            yield failure_event(metrics, payload)
            break
    yield "data: [DONE]\n\n"


def failure_event(metrics: Metrics, error: BaseException) -> str:
    metrics.observe_error("server_error")
    body = {
        "message": f"generation failed ({type(error).__name__}); the server log has the details",
        "type": "server_error",
        "param": None,
        "code": "internal_error",
    }
    return f"data: {json.dumps({'error': body})}\n\n"


def usage(results: Sequence[RowResult]) -> dict[str, Any]:
    """The prompt counted once (the choices share it), every choice's completion tokens."""
    prompt = results[0].prompt_tokens
    completion = sum(result.completion_tokens for result in results)
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}
