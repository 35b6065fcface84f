"""The request body as JSON, with the two ways Python's parser fails on hostile input turned
into a 400 that names the field: integers of thousands of digits (``int`` refuses above 4,300,
and no count here needs more than 18) and nesting deep enough to exhaust the recursion limit."""

from __future__ import annotations

import json
import re
from typing import Any

from dpmtv.serve._errors import ApiError

MAX_INT_DIGITS = 18
MAX_DEPTH = 64  # the chat schema nests 5 deep
_TOKEN = re.compile(rb'"(?:[^"\\]|\\.)*"|[\[\]{}]')


class _HugeInteger(float):
    """Stands for an integer literal with more than MAX_INT_DIGITS digits (an infinite float, so
    pydantic refuses it for any integer field and names the field)."""


def parse_json_body(body: bytes) -> Any:
    try:
        return json.loads(body, parse_int=_integer)
    except RecursionError:
        field = deep_field(body)
        raise ApiError(
            400,
            f"request body nests deeper than {MAX_DEPTH} levels in field '{field}'",
            code="invalid_json",
            param=field,
        ) from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ApiError(400, f"request body is not valid JSON: {exc}", code="invalid_json") from None


def _integer(text: str) -> int | float:
    if len(text.lstrip("-")) > MAX_INT_DIGITS:
        return _HugeInteger("inf")
    return int(text)


def is_huge_integer(value: Any) -> bool:
    return isinstance(value, _HugeInteger)


def deep_field(body: bytes) -> str:
    """The top-level key under which the body first nests deeper than MAX_DEPTH."""
    depth, key, last_string = 0, "(top level)", None
    for match in _TOKEN.finditer(body):
        token = match.group()
        if token in (b"[", b"{"):
            if depth == 1 and last_string is not None:
                key = last_string
            depth += 1
            if depth > MAX_DEPTH:
                return key
        elif token in (b"]", b"}"):
            depth -= 1
        elif depth == 1:
            last_string = token[1:-1].decode("utf-8", "replace")[:64]
    return key
