"""``POST /v1/completions``: a text prompt, tokenized as it is (no chat template, no images),
answered with a vector or the bare model, in OpenAI's legacy completions format.

For likelihood scoring: ``echo`` returns the prompt before the answer, and with ``logprobs`` the
prompt tokens' log-probabilities too (``max_tokens`` 0 scores without generating). The vector
is patched at the last position of each forward call, so it changes the log-probabilities of the
tokens generated after the prompt, not those of the prompt's own tokens: score a closed set of
answers as continuations (``dpmtv answer --choices``, :func:`dpmtv.inference.choice_probabilities`).
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Sequence
from typing import Any

from pydantic import Field

from dpmtv.serve._body import parse_json_body
from dpmtv.serve._errors import ApiError
from dpmtv.serve._fields import check_fields
from dpmtv.serve._generation import RowRequest, RowResult
from dpmtv.serve._options import MAX_CHOICES, SamplingFields, max_new_tokens, served_vector
from dpmtv.serve._requests import validated, vocab_size
from dpmtv.serve._responses import usage
from dpmtv.serve._served import ServedModel
from dpmtv.serve._settings import ServeSettings
from dpmtv.serve._tracker import TokenLogprob

MAX_LOGPROBS = 5  # the legacy API's limit


class CompletionRequest(SamplingFields):
    prompt: str | list[str] = Field(min_length=1)
    logprobs: int | None = Field(None, ge=0, le=MAX_LOGPROBS)
    echo: bool = False

    @property
    def prompts(self) -> list[str]:
        return [self.prompt] if isinstance(self.prompt, str) else list(self.prompt)


def completion_rows(
    body: bytes, served: ServedModel, settings: ServeSettings
) -> tuple[CompletionRequest, tuple[RowRequest, ...]]:
    """The checked request and its rows: ``n`` per prompt, prompt by prompt."""
    request = validated(CompletionRequest, check_fields(parse_json_body(body), endpoint="text"))
    vector = served_vector(request.model, served)
    if request.stream:
        raise ApiError(
            400, "stream is not supported on /v1/completions", code="unsupported_field", param="stream"
        )
    prompts = request.prompts
    if len(prompts) * request.n > MAX_CHOICES:
        raise ApiError(
            400,
            f"{len(prompts)} prompts × n={request.n} choices; the limit is {MAX_CHOICES}",
            code="unsupported_n",
            param="prompt",
        )
    if sum(len(prompt) for prompt in prompts) > settings.max_question_chars:
        raise ApiError(
            400,
            f"the prompts exceed {settings.max_question_chars} characters",
            code="question_too_long",
            param="prompt",
        )
    if request.max_tokens == 0 and request.echo:
        new_tokens = 0  # score the prompt only
    else:
        new_tokens = max_new_tokens(
            request.max_tokens, "max_tokens", default=settings.default_max_tokens, cap=settings.max_tokens
        )
    vocab = vocab_size(served) if request.logit_bias else 0  # read only to check logit_bias
    decodings = request.decodings(vocab, top_logprobs=request.logprobs)
    stop, cancelled = request.stop_strings(), threading.Event()
    rows = tuple(
        RowRequest(
            prompt,
            vector,
            new_tokens,
            cancelled,
            decoding=decoding,
            stop=stop,
            echo_logprobs=request.echo and request.logprobs is not None,
        )
        for prompt in prompts
        for decoding in decodings
    )
    return request, rows


def completion_body(
    request: CompletionRequest, rows: Sequence[RowRequest], results: Sequence[RowResult]
) -> dict[str, Any]:
    choices = []
    for index, (row, result) in enumerate(zip(rows, results, strict=True)):
        prefix = row.prompt if request.echo else ""
        assert isinstance(prefix, str)
        entries: list[TokenLogprob] = [*result.prompt_logprobs, *result.logprobs]
        choices.append(
            {
                "text": prefix + result.text,
                "index": index,
                "logprobs": None if request.logprobs is None else _legacy(entries),
                "finish_reason": result.finish_reason if row.max_new_tokens else "length",
            }
        )
    return {
        "id": f"cmpl-{uuid.uuid4().hex}",
        "object": "text_completion",
        "created": int(time.time()),
        "model": request.model,
        "system_fingerprint": None,
        "choices": choices,
        "usage": usage(results),
    }


def _legacy(entries: Sequence[TokenLogprob]) -> dict[str, Any]:
    """OpenAI's legacy logprobs: parallel lists of tokens, their log-probabilities, the top
    alternatives (a dict per token) and each token's offset in the returned text."""
    offsets, offset = [], 0
    for entry in entries:
        offsets.append(offset)
        offset += len(entry.token)
    return {
        "tokens": [entry.token for entry in entries],
        "token_logprobs": [entry.logprob for entry in entries],
        "top_logprobs": [None if entry.logprob is None else dict(entry.top) for entry in entries],
        "text_offset": offsets,
    }
