"""Every OpenAI request field is honoured or refused, never accepted and ignored.

The fields dpmtv acts on are in the request schemas (:mod:`dpmtv.serve._requests`). The rest are
checked here, before the schema: a field that only names the caller (``user``) is accepted and
has no effect, as in OpenAI's API; a field whose value could change the answer, or promises what
dpmtv does not do (storing the completion, calling tools, audio), is accepted only with the value
that means "as dpmtv does anyway" and otherwise refused with a 400 naming it. A field OpenAI does
not define is refused too, so a typo or another server's extension is never silently dropped.
``docs/reference/openai-fields.md`` lists the same table for users.
"""

from __future__ import annotations

import json
from typing import Any

from dpmtv.serve._errors import ApiError

# Fields that identify the caller: no effect on the answer in OpenAI's API either; never stored.
IDENTIFYING = ("user", "safety_identifier")

# field → (values meaning "what dpmtv does anyway", why any other value is refused)
_ONLY: dict[str, tuple[list[Any], str]] = {
    "response_format": ([{"type": "text"}], "answers are plain text; JSON output is not enforced"),
    "tools": ([[]], "dpmtv does not call tools"),
    "tool_choice": (["none"], "dpmtv does not call tools"),
    "parallel_tool_calls": ([], "dpmtv does not call tools"),
    "functions": ([[]], "dpmtv does not call functions"),
    "function_call": (["none"], "dpmtv does not call functions"),
    "store": ([False], "dpmtv stores no completions"),
    "metadata": ([{}], "dpmtv stores no completions to attach metadata to"),
    "service_tier": (["auto", "default"], "dpmtv has one service tier"),
    "modalities": ([["text"]], "dpmtv answers in text only"),
    "audio": ([], "dpmtv answers in text only"),
    "prediction": ([], "predicted outputs are not supported"),
    "reasoning_effort": ([], "the served models are not reasoning models"),
    "verbosity": ([], "the answer's length is set by max_tokens only"),
    "web_search_options": ([], "dpmtv does not search the web"),
    "prompt_cache_key": ([], "dpmtv keeps no prompt cache"),
    "prompt_cache_retention": ([], "dpmtv keeps no prompt cache"),
}

CHAT_FIELDS = (
    "model",
    "messages",
    "max_tokens",
    "max_completion_tokens",
    "temperature",
    "top_p",
    "n",
    "seed",
    "stop",
    "logprobs",
    "top_logprobs",
    "logit_bias",
    "frequency_penalty",
    "presence_penalty",
    "stream",
    "stream_options",
    *IDENTIFYING,
    *_ONLY,
)

COMPLETION_FIELDS = (
    "model",
    "prompt",
    "max_tokens",
    "temperature",
    "top_p",
    "n",
    "seed",
    "stop",
    "logprobs",
    "echo",
    "logit_bias",
    "frequency_penalty",
    "presence_penalty",
    "stream",
    "stream_options",
    "user",
    "best_of",
    "suffix",
)
_COMPLETION_ONLY: dict[str, tuple[list[Any], str]] = {
    "best_of": ([1], "best_of must be 1: use n"),
    "suffix": ([""], "insertion (suffix) is not supported"),
}


def check_fields(raw: Any, *, endpoint: str) -> dict[str, Any]:
    """``raw`` without the fields checked here: unknown or refused fields raise a 400 naming them;
    ``null`` counts as absent, as in OpenAI's API."""
    if not isinstance(raw, dict):
        raise ApiError(400, "the request body must be a JSON object", code="invalid_request")
    known, only = (CHAT_FIELDS, _ONLY) if endpoint == "chat" else (COMPLETION_FIELDS, _COMPLETION_ONLY)
    for name in raw:
        if name not in known:
            raise ApiError(
                400,
                f"unsupported field '{name}': not an OpenAI {endpoint} completions field that dpmtv honours "
                "(docs/reference/openai-fields.md lists them)",
                code="unsupported_field",
                param=name,
            )
    kept: dict[str, Any] = {}
    for name, value in raw.items():
        if value is None or name in IDENTIFYING:
            continue
        if name in only:
            accepted, why = only[name]
            if value not in accepted:
                shown = json.dumps(value)
                shown = shown if len(shown) <= 60 else shown[:57] + "..."
                raise ApiError(
                    400, f"{name}={shown} is not supported: {why}", code="unsupported_field", param=name
                )
            continue
        kept[name] = value
    return kept
