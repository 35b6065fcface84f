"""docs/reference/openai-fields.md, walked: each OpenAI field changes the answer as documented,
or is refused with a 400 naming it, never accepted and ignored."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from dpmtv.serve._fields import CHAT_FIELDS
from tests.serve.conftest import STEADY_VECTOR, chat_body
from tests.serve.test_api import request

TABLE = Path(__file__).parents[2] / "docs" / "reference" / "openai-fields.md"
_ROW = re.compile(r"^\| `(\w+)` \| (\w+) \| `(.+?)` \|")


def _chat_rows() -> dict[str, tuple[str, object]]:
    text = TABLE.read_text(encoding="utf-8").split("## `POST /v1/chat/completions`")[1].split("\n## ")[0]
    return {m[1]: (m[2], json.loads(m[3])) for line in text.splitlines() if (m := _ROW.match(line))}


ROWS = _chat_rows()


def test_the_table_lists_every_field_the_server_knows():
    assert set(ROWS) == set(CHAT_FIELDS)


def _extra(field: str, example: object, answer: str) -> dict:
    if field == "stop":  # a piece of the greedy answer, so that the stop must cut it
        return {"stop": [answer[2:4]]}
    if isinstance(example, dict) and field in example:
        return dict(example)
    return {field: example}


def _outcome(response) -> object:
    """What a client sees, without the per-response id and time."""
    assert response.status_code == 200, response.text
    if response.headers["content-type"].startswith("text/event-stream"):
        events = [line[6:] for line in response.text.splitlines() if line.startswith("data: {")]
        chunks = [json.loads(event) for event in events]
        return [(chunk["choices"], chunk["usage"]) for chunk in chunks]
    body = response.json()
    return [(c["message"], c["finish_reason"], c["logprobs"]) for c in body["choices"]], body["usage"]


@pytest.fixture(scope="module")
def app(served):
    from dpmtv.serve import ServeSettings, create_app

    return create_app(served, ServeSettings())


@pytest.fixture(scope="module")
def greedy_answer(app) -> str:
    answer = request(app, "POST", "/v1/chat/completions", json=chat_body(STEADY_VECTOR, max_tokens=6))
    return answer.json()["choices"][0]["message"]["content"]


@pytest.mark.parametrize("field", sorted(ROWS))
def test_each_field_is_honoured_as_documented_or_refused(app, greedy_answer, field):
    effect, example = ROWS[field]
    base = chat_body(STEADY_VECTOR, max_tokens=6)
    if effect == "required":
        del base[field]
        error = request(app, "POST", "/v1/chat/completions", json=base).json()["error"]
        assert error["param"] == field, error
        return
    extra = _extra(field, example, greedy_answer)
    with_field = request(app, "POST", "/v1/chat/completions", json={**base, **extra})
    if effect == "refused":
        assert with_field.status_code == 400, with_field.text
        assert with_field.json()["error"]["param"] == field
        assert field in with_field.json()["error"]["message"]
        return
    without = {**base, **{k: v for k, v in extra.items() if k != field}}
    without.pop(field, None)
    baseline = request(app, "POST", "/v1/chat/completions", json=without)
    assert effect in ("changes", "same")
    if effect == "changes":
        assert _outcome(with_field) != _outcome(baseline)
    else:
        assert _outcome(with_field) == _outcome(baseline)


def test_a_field_openai_does_not_define_is_refused_by_name(app):
    response = request(app, "POST", "/v1/chat/completions", json=chat_body(STEADY_VECTOR, top_k=5))
    assert response.status_code == 400
    assert response.json()["error"]["param"] == "top_k"
    assert "top_k" in response.json()["error"]["message"]


def test_the_completions_table_names_every_field_the_endpoint_knows():
    from dpmtv.serve._fields import COMPLETION_FIELDS

    section = TABLE.read_text(encoding="utf-8").split("## `POST /v1/completions`")[1]
    rows = [line.split(" | ")[0] for line in section.splitlines() if line.startswith("| `")]
    documented = set(re.findall(r"`(\w+)`", " ".join(rows)))
    assert documented == set(COMPLETION_FIELDS)


@pytest.mark.parametrize(
    ("extra", "field"),
    [
        ({"suffix": "!"}, "suffix"),
        ({"best_of": 3}, "best_of"),
        ({"stream": True}, "stream"),
        ({"tools": []}, "tools"),
    ],
)
def test_completions_refuse_what_they_do_not_honour(app, extra, field):
    body = {"model": STEADY_VECTOR, "prompt": "The answer is", "max_tokens": 2, **extra}
    response = request(app, "POST", "/v1/completions", json=body)
    assert response.status_code == 400, response.text
    assert response.json()["error"]["param"] == field


def test_stream_options_without_stream_is_refused(app):
    body = chat_body(STEADY_VECTOR, max_tokens=2, stream_options={"include_usage": True})
    response = request(app, "POST", "/v1/chat/completions", json=body)
    assert response.status_code == 400 and response.json()["error"]["param"] == "stream_options"
