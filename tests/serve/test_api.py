"""Every endpoint and error of the HTTP API, in process (httpx ASGI transport)."""

from __future__ import annotations

import asyncio
import base64
import io
import json

import httpx
import pytest
from PIL import Image

from dpmtv.data.prompts import Example
from dpmtv.inference import answer_queries
from dpmtv.serve._images import image_from_data_url
from tests.serve.conftest import chat_body, png_data_url, run


async def _request(app, method, path, **kwargs):
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="http://127.0.0.1"
    ) as client:
        return await client.request(method, path, **kwargs)


def request(app, method, path, **kwargs) -> httpx.Response:
    return run(_request(app, method, path, **kwargs))


async def _concurrent(app, bodies):
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="http://127.0.0.1"
    ) as client:
        return await asyncio.gather(*(client.post("/v1/chat/completions", json=body) for body in bodies))


def _query(seed: int) -> Example:
    return Example(
        (image_from_data_url(png_data_url(seed=seed), max_pixels=10**6, param="x"),), "What is shown?"
    )


def metric_values(text: str) -> dict[tuple[str, tuple], float]:
    """Prometheus text parsed by prometheus_client's own parser: (sample name, labels) → value."""
    from prometheus_client.parser import text_string_to_metric_families

    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def _error(response: httpx.Response, status: int, code: str) -> dict:
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"} and error["code"] == code
    assert error["message"]
    return error


# ---- models, health, page ------------------------------------------------------------------


def test_models_lists_each_vector_with_its_guarantee_and_the_bare_model(make_app, served):
    body = request(make_app(), "GET", "/v1/models").json()
    cards = {card["id"]: card for card in body["data"]}
    assert list(cards) == ["colour", "shape", served.name]
    colour = cards["colour"]["dpmtv"]
    assert colour["kind"] == "task_vector"
    g = colour["guarantee"]
    assert g["private"] is True and g["epsilon"] == 1.0 and g["delta"] == 1e-5
    assert g["neighbouring_relation"] == "replace-one" and g["privacy_unit"] == "record"
    assert g["num_chunks"] == 4 and g["shots_per_chunk"] == 4 and g["num_heads"] == 2 * 4
    metadata = served.vectors["colour"].vector.metadata
    assert g["model_fingerprint"]["attention_weights_sha256"] == metadata.model["attention_weights_sha256"]
    assert "no further privacy" in colour["privacy_statement"]
    shape = cards["shape"]["dpmtv"]
    assert shape["guarantee"]["private"] is False and shape["guarantee"]["epsilon"] is None
    assert shape["privacy_statement"].startswith("NOT PRIVATE")
    assert (
        cards[served.name]["dpmtv"]["kind"] == "zero_shot"
        and cards[served.name]["dpmtv"]["guarantee"] is None
    )
    assert "never receives private records" in body["dpmtv"]["queries"]


def test_model_retrieve_and_unknown_model(make_app):
    app = make_app()
    assert request(app, "GET", "/v1/models/colour").json()["id"] == "colour"
    _error(request(app, "GET", "/v1/models/nope"), 404, "model_not_found")


def test_healthz(make_app, served):
    body = request(make_app(), "GET", "/healthz").json()
    assert body["status"] == "ok" and body["models"] == ["colour", "shape", served.name]
    assert body["auth_required"] is False
    assert request(make_app(), "GET", "/health").json() == body


def test_page_and_its_static_files_are_served_and_reference_nothing_external(make_app):
    app = make_app()
    page = request(app, "GET", "/")
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    texts = [page.text]
    for name, kind in (("app.js", "text/javascript"), ("style.css", "text/css")):
        response = request(app, "GET", f"/static/{name}")
        assert response.status_code == 200 and response.headers["content-type"].startswith(kind)
        texts.append(response.text)
    assert not any("http://" in text or "https://" in text or "//cdn" in text for text in texts)
    _error(request(app, "GET", "/static/../_app.py"), 404, "not_found")


# ---- answers ------------------------------------------------------------------------------


@pytest.mark.parametrize("model", ["colour", "shape", None])
def test_an_answer_equals_dpmtv_answer_with_the_same_vector(make_app, served, model):
    name = model or served.name
    response = request(make_app(), "POST", "/v1/chat/completions", json=chat_body(name, max_tokens=6))
    assert response.status_code == 200, response.text
    body = response.json()
    vector = served.vectors[model].vector if model else None
    expected = answer_queries(served.loaded, [_query(0)], vector=vector, max_new_tokens=6)[0]
    assert body["object"] == "chat.completion" and body["model"] == name
    choice = body["choices"][0]
    assert choice["message"] == {"role": "assistant", "content": expected}
    assert choice["finish_reason"] in ("stop", "length")
    usage = body["usage"]
    assert (
        usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"]
        and usage["prompt_tokens"] > 0
    )


@pytest.mark.parametrize("mode", ["every-call", "prefill-only"])
def test_a_mixed_batch_patches_each_row_with_its_own_vector(tiny_llava_path, served_vectors, mode):
    """One batch holding rows for two vectors and zero-shot gives each row the answer it gets alone."""
    from dpmtv.serve import create_app, load_served_model
    from dpmtv.serve._settings import ServeSettings

    served = load_served_model(str(tiny_llava_path), sorted(served_vectors.items()), patch_mode=mode)
    # A window long enough for all six requests to arrive, even on a busy machine.
    app = create_app(served, ServeSettings(batch_window_ms=2000, max_batch_size=32))
    plan = [("colour", 1), ("shape", 2), (served.name, 3), ("colour", 4), ("shape", 1), (served.name, 2)]
    responses = run(_concurrent(app, [chat_body(name, image_seed=seed, max_tokens=5) for name, seed in plan]))
    for (name, seed), response in zip(plan, responses):
        vector = served.vectors[name].vector if name in served.vectors else None
        alone = answer_queries(served.loaded, [_query(seed)], vector=vector, max_new_tokens=5, mode=mode)[0]
        assert response.json()["choices"][0]["message"]["content"] == alone, (name, seed)
    metrics = metric_values(request(app, "GET", "/metrics").text)
    assert metrics[("dpmtv_batch_size_count", ())] == 1 and metrics[("dpmtv_batch_size_sum", ())] == 6


def test_stream_sends_the_same_answer_as_server_sent_events(make_app, served):
    app = make_app()
    whole = request(app, "POST", "/v1/chat/completions", json=chat_body("colour", max_tokens=6)).json()
    response = request(
        app,
        "POST",
        "/v1/chat/completions",
        json=chat_body("colour", max_tokens=6, stream=True, stream_options={"include_usage": True}),
    )
    assert response.status_code == 200 and response.headers["content-type"].startswith("text/event-stream")
    events = [line[len("data: ") :] for line in response.text.split("\n\n") if line]
    assert events[-1] == "[DONE]"
    chunks = [json.loads(event) for event in events[:-1]]
    assert all(
        chunk["object"] == "chat.completion.chunk" and chunk["id"] == chunks[0]["id"] for chunk in chunks
    )
    assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
    text = "".join(chunk["choices"][0]["delta"].get("content", "") for chunk in chunks if chunk["choices"])
    assert text.strip() == whole["choices"][0]["message"]["content"]
    assert chunks[-2]["choices"][0]["finish_reason"] == whole["choices"][0]["finish_reason"]
    # include_usage: one last chunk with no choices carries the usage; the others carry none
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"] == whole["usage"]
    assert all(chunk["usage"] is None for chunk in chunks[:-1])


def test_a_stream_without_include_usage_sends_no_usage(make_app):
    response = request(
        make_app(), "POST", "/v1/chat/completions", json=chat_body("colour", max_tokens=3, stream=True)
    )
    chunks = [json.loads(line[6:]) for line in response.text.split("\n\n") if line and line != "data: [DONE]"]
    assert chunks[-1]["choices"][0]["finish_reason"] and all(chunk["usage"] is None for chunk in chunks)


def test_log_probability_entries_spell_the_answer_when_special_tokens_are_generated(make_app, served):
    """A generated special token (<s>, forced here by logit_bias; a random-weight model samples
    them) is left out of the text, so its entry's token is empty too: the entries spell the
    answer, as OpenAI's do, streaming or not. Its log-probability is still given."""
    bos = served.loaded.adapter.tokenizer.bos_token_id
    for stream in (False, True):
        body = chat_body(
            "colour", max_tokens=3, logprobs=True, top_logprobs=2, logit_bias={str(bos): 100}, stream=stream
        )
        response = request(make_app(), "POST", "/v1/chat/completions", json=body)
        if stream:
            chunks = [
                json.loads(line[6:]) for line in response.text.split("\n\n") if line.startswith("data: {")
            ]
            choices = [chunk["choices"][0] for chunk in chunks if chunk["choices"]]
            content = "".join(c["delta"].get("content") or "" for c in choices)
            entries = [e for c in choices if c.get("logprobs") for e in c["logprobs"]["content"]]
        else:
            choice = response.json()["choices"][0]
            content, entries = choice["message"]["content"], choice["logprobs"]["content"]
        assert content == "" and len(entries) == 3, (stream, content, entries)
        assert [entry["token"] for entry in entries] == [""] * 3
        assert all(entry["logprob"] <= 0 and entry["bytes"] == [] for entry in entries)


def test_text_only_question_and_max_completion_tokens(make_app, served):
    response = request(
        make_app(),
        "POST",
        "/v1/chat/completions",
        json={
            "model": served.name,
            "messages": [{"role": "user", "content": "hello"}],
            "max_completion_tokens": 3,
            "temperature": 0,
            "user": "ignored-field",
        },
    )
    assert response.status_code == 200, response.text
    assert response.json()["usage"]["completion_tokens"] <= 3


# ---- errors: one shape, a 4xx, and the server keeps serving --------------------------------


def _big_png_data_url(width: int, height: int) -> str:
    buffer = io.BytesIO()
    Image.new("RGB", (width, height)).save(buffer, format="PNG")
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode()


def _with_image(url: str) -> dict:
    return {
        "model": "colour",
        "messages": [
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "What?"},
                    {"type": "image_url", "image_url": {"url": url}},
                ],
            }
        ],
    }


BAD_REQUESTS = {
    "invalid_json": (400, b'{"model": "colour", "messages": ['),
    "invalid_request": (400, {"messages": [{"role": "user", "content": "hi"}]}),
    "model_not_found": (404, chat_body("no-such-vector")),
    "unsupported_image_url": (400, _with_image("https://example.com/cat.png")),
    "unsupported_image_format": (
        400,
        _with_image("data:image/png;base64," + base64.b64encode(b"not an image").decode()),
    ),
    "invalid_image": (
        400,
        _with_image("data:image/png;base64," + base64.b64encode(b"\x89PNG\r\n\x1a\n" + b"x" * 40).decode()),
    ),
    "image_too_large": (400, _with_image(_big_png_data_url(1200, 1000))),
    "max_tokens_out_of_range": (400, chat_body("colour", max_tokens=0)),
    "unsupported_n": (400, chat_body("colour", n=2, stream=True)),
    "unsupported_field": (400, chat_body("colour", response_format={"type": "json_object"})),
    "invalid_stop": (400, chat_body("colour", stop=["", "x"])),
    "invalid_logit_bias": (400, chat_body("colour", logit_bias={"abc": 5})),
    "invalid_logprobs": (400, chat_body("colour", top_logprobs=2)),
    "unsupported_messages": (
        400,
        {
            "model": "colour",
            "messages": [{"role": "assistant", "content": "hello"}, {"role": "user", "content": "hi"}],
        },
    ),
    "too_many_images": (
        400,
        {
            "model": "colour",
            "messages": [
                {
                    "role": "user",
                    "content": [
                        {"type": "image_url", "image_url": {"url": png_data_url(seed=i)}} for i in range(5)
                    ],
                }
            ],
        },
    ),
    "body_too_large": (413, {"model": "colour", "messages": [{"role": "user", "content": "x" * 300_000}]}),
}


@pytest.mark.parametrize("code", sorted(BAD_REQUESTS))
def test_a_bad_request_gets_a_clear_4xx_and_the_server_keeps_serving(make_app, code):
    status, body = BAD_REQUESTS[code]
    app = make_app(max_body_bytes=200_000, max_image_pixels=1_000_000, max_images=4)
    kwargs = {"content": body} if isinstance(body, bytes) else {"json": body}
    error = _error(request(app, "POST", "/v1/chat/completions", **kwargs), status, code)
    assert error["type"] == "invalid_request_error"
    if code in ("unsupported_image_url", "unsupported_image_format", "invalid_image", "image_too_large"):
        assert error["param"] == "messages.0.content.1"  # the offending content part
    after = request(app, "POST", "/v1/chat/completions", json=chat_body("colour", max_tokens=2))
    assert after.status_code == 200
    metrics = metric_values(request(app, "GET", "/metrics").text)
    assert metrics[("dpmtv_errors_total", (("type", "invalid_request_error"),))] == 1


def test_unknown_route_and_method_use_the_error_shape(make_app):
    app = make_app()
    _error(request(app, "GET", "/v1/nothing"), 404, "not_found")
    _error(request(app, "GET", "/v1/chat/completions"), 405, "method_not_allowed")


def test_a_full_queue_answers_429_and_the_rest_are_served(make_app):
    app = make_app(max_queue=1, max_batch_size=1, batch_window_ms=0)
    responses = run(_concurrent(app, [chat_body("colour", image_seed=i, max_tokens=4) for i in range(8)]))
    statuses = sorted(response.status_code for response in responses)
    assert 429 in statuses and set(statuses) == {200, 429}
    rejected = next(response for response in responses if response.status_code == 429)
    assert _error(rejected, 429, "queue_full")["type"] == "rate_limit_error"
    assert int(rejected.headers["retry-after"]) >= 1


# ---- authentication --------------------------------------------------------------------------


def test_api_key_is_required_on_the_api_but_not_on_the_page(make_app):
    app = make_app(api_key="s3cret")
    for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": "Basic s3cret"}):
        response = request(app, "GET", "/v1/models", headers=headers)
        assert _error(response, 401, "invalid_api_key")["type"] == "authentication_error"
        assert response.headers["www-authenticate"] == "Bearer"
    _error(request(app, "POST", "/v1/chat/completions", json=chat_body("colour")), 401, "invalid_api_key")
    _error(request(app, "GET", "/metrics"), 401, "invalid_api_key")
    ok = {"Authorization": "Bearer s3cret"}
    assert request(app, "GET", "/v1/models", headers=ok).status_code == 200
    assert (
        request(
            app, "POST", "/v1/chat/completions", json=chat_body("colour", max_tokens=2), headers=ok
        ).status_code
        == 200
    )
    assert request(app, "GET", "/").status_code == 200
    assert request(app, "GET", "/healthz").json()["auth_required"] is True


def test_metrics_are_prometheus_text(make_app):
    app = make_app()
    request(app, "POST", "/v1/chat/completions", json=chat_body("colour", max_tokens=2))
    request(app, "POST", "/v1/chat/completions", json=chat_body("nope"))
    response = request(app, "GET", "/metrics")
    assert response.headers["content-type"].startswith("text/plain")
    values = metric_values(response.text)
    chat = "/v1/chat/completions"
    assert values[("dpmtv_requests_total", (("path", chat), ("status", "200")))] == 1
    assert values[("dpmtv_requests_total", (("path", chat), ("status", "404")))] == 1
    assert values[("dpmtv_request_latency_seconds_count", (("model", "colour"),))] == 1
    assert values[("dpmtv_time_to_first_token_seconds_count", (("model", "colour"),))] == 1
    assert 1 <= values[("dpmtv_generated_tokens_total", (("model", "colour"),))] <= 2
    assert values[("dpmtv_batch_size_count", ())] == 1
