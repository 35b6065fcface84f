"""Hostile and careless clients (issue 27's serving cases), in process: each gets a 4xx that
names the field or limit, and the server keeps serving."""

from __future__ import annotations

import asyncio
import base64
import io
import json
import struct
import zlib

import httpx
import pytest
from click.testing import CliRunner
from PIL import EpsImagePlugin, Image

from dpmtv.cli import main
from dpmtv.data.prompts import Example
from dpmtv.errors import ParameterError
from dpmtv.inference import answer_queries
from dpmtv.serve import ServeSettings
from dpmtv.serve._images import decode_image, encoded_image, image_from_data_url
from tests.serve.conftest import chat_body, png_data_url, run
from tests.serve.test_api import _error, metric_values, request


def _url(data: bytes, kind: str = "png") -> str:
    return f"data:image/{kind};base64," + base64.b64encode(data).decode()


def _image_body(url: str, **extra) -> dict:
    content = [{"type": "text", "text": "What?"}, {"type": "image_url", "image_url": {"url": url}}]
    return {"model": "colour", "messages": [{"role": "user", "content": content}], **extra}


# ---- formats: chosen from the bytes, one plugin, never Ghostscript ---------------------------

EPS = b"%!PS-Adobe-3.0 EPSF-3.0\n%%BoundingBox: 0 0 10 10\n%%EndComments\nnewpath 0 0 moveto showpage\n"


def test_eps_bytes_sent_as_png_never_reach_ghostscript(make_app, monkeypatch):
    calls = []

    def ghostscript(*args, **kwargs):
        calls.append(args)
        raise OSError("gs -q -dBATCH -sOutputFile=/tmp/x.png /tmp/x.eps")  # what a 500 once echoed

    monkeypatch.setattr(EpsImagePlugin, "Ghostscript", ghostscript)
    monkeypatch.setattr(EpsImagePlugin, "has_ghostscript", lambda: True)
    response = request(make_app(), "POST", "/v1/chat/completions", json=_image_body(_url(EPS)))
    error = _error(response, 400, "unsupported_image_format")
    assert "PNG, JPEG, WebP, GIF" in error["message"] and "gs " not in error["message"]
    assert error["param"] == "messages.0.content.1" and calls == []


@pytest.mark.parametrize("kind", ["PNG", "JPEG", "WEBP", "GIF"])
def test_the_four_documented_formats_decode(kind):
    buffer = io.BytesIO()
    Image.new("RGB", (24, 12), (200, 10, 10)).save(buffer, format=kind)
    image = image_from_data_url(_url(buffer.getvalue()), max_pixels=10**6, param="p")
    assert image.size == (24, 12) and image.mode == "RGB"


@pytest.mark.parametrize("kind", ["TIFF", "BMP", "ICO", "PPM"])
def test_other_formats_are_refused_by_name_of_the_accepted_ones(make_app, kind):
    buffer = io.BytesIO()
    Image.new("RGB", (16, 16)).save(buffer, format=kind)
    response = request(make_app(), "POST", "/v1/chat/completions", json=_image_body(_url(buffer.getvalue())))
    assert "PNG, JPEG, WebP, GIF" in _error(response, 400, "unsupported_image_format")["message"]


# ---- decompression bombs: headers of 0.4–4.3 Gpx, refused from the header with the limit ------


def _png_chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))


def _png_header(width: int, height: int) -> bytes:
    """A 100-byte PNG whose header declares width × height (one tiny compressed row of data)."""
    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    idat = zlib.compress(b"\0" * 64)
    return (
        b"\x89PNG\r\n\x1a\n"
        + _png_chunk(b"IHDR", ihdr)
        + _png_chunk(b"IDAT", idat)
        + _png_chunk(b"IEND", b"")
    )


def _gif_header(width: int, height: int) -> bytes:
    return (
        b"GIF89a"
        + struct.pack("<HHBBB", width, height, 0, 0, 0)
        + b"\x2c"
        + b"\0" * 4
        + struct.pack("<HH", width, height)
        + b"\0\x02\x02\x44\x01\0;"
    )


def _jpeg_header(width: int, height: int) -> bytes:
    sof = struct.pack(">BHHB", 8, height, width, 3) + b"\x01\x11\x00\x02\x11\x00\x03\x11\x00"
    return b"\xff\xd8\xff\xc0" + struct.pack(">H", len(sof) + 2) + sof + b"\xff\xd9"


def _webp_header(width: int, height: int) -> bytes:
    canvas = (width - 1).to_bytes(3, "little") + (height - 1).to_bytes(3, "little")
    vp8x = b"VP8X" + struct.pack("<I", 10) + b"\0\0\0\0" + canvas
    return b"RIFF" + struct.pack("<I", 4 + len(vp8x)) + b"WEBP" + vp8x


BOMBS = {
    "png": _png_header(65_535, 65_535),  # 4.3 Gpx
    "gif": _gif_header(65_535, 65_535),
    "jpeg": _jpeg_header(65_500, 65_500),
    "webp": _webp_header(16_384, 16_384),  # 268 Mpx
    "png-20k": _png_header(20_000, 20_000),  # 400 Mpx, above PIL's own bomb limit
}


@pytest.mark.parametrize("name", sorted(BOMBS))
def test_decompression_bombs_are_image_too_large_with_the_limit(make_app, name):
    app = make_app(max_image_pixels=1_000_000)
    response = request(app, "POST", "/v1/chat/completions", json=_image_body(_url(BOMBS[name])))
    error = _error(response, 400, "image_too_large")
    assert "1000000" in error["message"] and "--max-image-pixels" in error["message"]
    assert request(app, "GET", "/healthz").status_code == 200


def test_a_request_over_its_pixel_sum_names_the_limit(make_app):
    body = chat_body("colour")
    body["messages"][0]["content"] += [
        {"type": "image_url", "image_url": {"url": png_data_url(size=(20, 20), seed=i)}} for i in range(3)
    ]
    app = make_app(max_request_pixels=1500, max_pixels_in_flight=1500)
    error = _error(request(app, "POST", "/v1/chat/completions", json=body), 400, "image_too_large")
    assert "--max-request-pixels" in error["message"] and "1600" in error["message"]


def test_a_large_jpeg_is_decoded_reduced(make_app):
    buffer = io.BytesIO()
    Image.effect_noise((2048, 1024), 64).convert("RGB").save(buffer, format="JPEG")
    encoded = encoded_image(_url(buffer.getvalue(), "jpeg"), max_pixels=4096 * 4096, param="p")
    assert (encoded.width, encoded.height) == (2048, 1024)
    assert decode_image(encoded, min_side=64).size == (128, 64)


# ---- admission by decoded size ----------------------------------------------------------------


def test_pixels_in_flight_beyond_the_budget_get_429_with_retry_after(make_app, served):
    """The first request holds its reduced image (32×32) while it waits for company; the second
    declares 40×40 = 1600 pixels, which would pass the 2000-pixel budget."""
    app = make_app(max_request_pixels=1600, max_pixels_in_flight=2000, batch_window_ms=1500)
    assert served.image_min_side == 32
    bodies = [_image_body(png_data_url(size=(40, 40), seed=i), max_tokens=2) for i in range(2)]

    async def both():
        async with httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app), base_url="http://127.0.0.1"
        ) as client:
            first = asyncio.ensure_future(client.post("/v1/chat/completions", json=bodies[0]))
            await asyncio.sleep(0.5)
            second = await client.post("/v1/chat/completions", json=bodies[1])
            return await first, second

    first, second = run(both())
    assert first.status_code == 200
    error = _error(second, 429, "pixels_in_flight")
    assert "--max-pixels-in-flight 2000" in error["message"] and int(second.headers["retry-after"]) >= 1
    assert metric_values(request(app, "GET", "/metrics").text)[("dpmtv_pixels_in_flight", ())] == 0


# ---- errors that were 500s ----------------------------------------------------------------------


def test_a_5000_digit_max_tokens_is_a_400_naming_the_field(make_app):
    body = (
        b'{"model": "colour", "messages": [{"role": "user", "content": "hi"}], "max_tokens": '
        + b"9" * 5000
        + b"}"
    )
    error = _error(request(make_app(), "POST", "/v1/chat/completions", content=body), 400, "invalid_request")
    assert error["param"] == "max_tokens" and "18 digits" in error["message"]


def test_a_100000_deep_json_array_is_a_400_naming_the_field(make_app):
    body = b'{"model": "colour", "messages": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"
    error = _error(request(make_app(), "POST", "/v1/chat/completions", content=body), 400, "invalid_json")
    assert error["param"] == "messages" and "deeper than" in error["message"]


@pytest.mark.parametrize("key", [" k3y", "k3y ", "kéy", "k3y\t", "a b"])
def test_api_keys_no_client_can_send_are_refused_at_start_up(key, tiny_llava_path):
    with pytest.raises(ParameterError, match="api_key"):
        ServeSettings(api_key=key)
    result = CliRunner().invoke(
        main, ["serve", "--model", "/nonexistent", "--port", "1"], env={"DPMTV_API_KEY": key}
    )
    assert result.exit_code == 2 and "api_key" in result.output and "does not exist" not in result.output


def test_an_internal_error_names_only_its_type(make_app, served, monkeypatch):
    import dpmtv.serve._messages as requests_module

    def broken(*args, **kwargs):
        raise RuntimeError("gs -sDEVICE=png16m -sOutputFile=/tmp/secret.png")

    monkeypatch.setattr(requests_module, "decode_image", broken)
    response = request(make_app(), "POST", "/v1/chat/completions", json=chat_body("colour"))
    error = _error(response, 500, "internal_error")
    assert (
        "RuntimeError" in error["message"]
        and "gs " not in error["message"]
        and "/tmp" not in error["message"]
    )


# ---- what lmms-eval and other OpenAI clients send -----------------------------------------------


def test_max_tokens_is_an_upper_bound_and_a_cap_says_length(make_app):
    app = make_app(max_tokens=3, default_max_tokens=2)
    body = request(app, "POST", "/v1/chat/completions", json=chat_body("colour", max_tokens=1024)).json()
    assert body["usage"]["completion_tokens"] <= 3
    if body["usage"]["completion_tokens"] == 3:
        assert body["choices"][0]["finish_reason"] == "length"


def test_system_messages_are_folded_into_the_query(make_app, served):
    messages = [
        {"role": "system", "content": "Answer in one word."},
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "What is shown?"},
                {"type": "image_url", "image_url": {"url": png_data_url(seed=3)}},
            ],
        },
    ]
    response = request(
        make_app(),
        "POST",
        "/v1/chat/completions",
        json={"model": "colour", "messages": messages, "max_tokens": 5},
    )
    assert response.status_code == 200, response.text
    image = image_from_data_url(png_data_url(seed=3), max_pixels=10**6, param="x")
    query = Example((image,), "Answer in one word.\n\nWhat is shown?")
    expected = answer_queries(
        served.loaded, [query], vector=served.vectors["colour"].vector, max_new_tokens=5
    )[0]
    assert response.json()["choices"][0]["message"]["content"] == expected


def test_eleven_images_are_answered_and_seventeen_name_the_limit(make_app):
    def body(count):
        parts = [{"type": "text", "text": "Which?"}]
        parts += [{"type": "image_url", "image_url": {"url": png_data_url(seed=i)}} for i in range(count)]
        return {"model": "colour", "messages": [{"role": "user", "content": parts}], "max_tokens": 2}

    app = make_app()
    assert request(app, "POST", "/v1/chat/completions", json=body(11)).status_code == 200
    error = _error(request(app, "POST", "/v1/chat/completions", json=body(17)), 400, "too_many_images")
    assert "the limit is 16 (--max-images)" in error["message"]


# ---- Host and Origin ----------------------------------------------------------------------------


def test_without_a_key_only_loopback_host_names_are_answered(make_app):
    app = make_app()
    for host in ("evil.example", "evil.example:8000", "127.0.0.1.nip.io"):
        error = _error(request(app, "GET", "/v1/models", headers={"Host": host}), 403, "host_not_allowed")
        assert "--allowed-host" in error["message"]
    for host in ("127.0.0.1:8000", "localhost", "[::1]:8000"):
        assert request(app, "GET", "/v1/models", headers={"Host": host}).status_code == 200
    allowed = make_app(allowed_hosts=("box.lan",))
    assert request(allowed, "GET", "/v1/models", headers={"Host": "box.lan:8000"}).status_code == 200
    keyed = make_app(api_key="k")
    response = request(
        keyed, "GET", "/v1/models", headers={"Host": "evil.example", "Authorization": "Bearer k"}
    )
    assert response.status_code == 200  # a rebinding page cannot know the key


def test_a_cross_site_text_plain_post_is_refused_before_anything_runs(make_app):
    app = make_app()
    body = chat_body("colour", max_tokens=2)
    response = request(
        app,
        "POST",
        "/v1/chat/completions",
        content=json.dumps(body),
        headers={"Origin": "http://evil.example", "Content-Type": "text/plain"},
    )
    assert "--allowed-origin" in _error(response, 403, "origin_not_allowed")["message"]
    assert metric_values(request(app, "GET", "/metrics").text)[("dpmtv_batch_size_count", ())] == 0
    same_origin = request(
        app, "POST", "/v1/chat/completions", json=body, headers={"Origin": "http://127.0.0.1"}
    )
    assert same_origin.status_code == 200


def test_an_allowed_origin_gets_cors_headers_and_a_preflight(make_app):
    app = make_app(allowed_origins=("http://localhost:3000",))
    preflight = request(
        app,
        "OPTIONS",
        "/v1/chat/completions",
        headers={"Origin": "http://localhost:3000", "Access-Control-Request-Method": "POST"},
    )
    assert preflight.status_code == 204
    assert preflight.headers["access-control-allow-origin"] == "http://localhost:3000"
    assert "Authorization" in preflight.headers["access-control-allow-headers"]
    models = request(app, "GET", "/v1/models", headers={"Origin": "http://localhost:3000"})
    assert (
        models.status_code == 200 and models.headers["access-control-allow-origin"] == "http://localhost:3000"
    )
    _error(
        request(app, "GET", "/v1/models", headers={"Origin": "http://localhost:3001"}),
        403,
        "origin_not_allowed",
    )
