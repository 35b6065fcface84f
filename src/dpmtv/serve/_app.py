"""The FastAPI application: routes, bearer auth, body limit, OpenAI error shape, metrics."""

from __future__ import annotations

import hmac
import json
import time
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from importlib import resources

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, JSONResponse, PlainTextResponse, Response, StreamingResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from dpmtv._version import __version__
from dpmtv.serve._batcher import DynamicBatcher, Job, QueueFullError
from dpmtv.serve._errors import ApiError, error_response
from dpmtv.serve._generation import RowResult
from dpmtv.serve._guarantee import QUERIES_ARE_FREE, model_cards
from dpmtv.serve._metrics import Metrics
from dpmtv.serve._requests import parse_chat_request, row_request
from dpmtv.serve._served import ServedModel
from dpmtv.serve._settings import ServeSettings

_STATIC = {"app.js": "text/javascript", "style.css": "text/css"}
_PATHS = {
    "/",
    "/healthz",
    "/metrics",
    "/v1/models",
    "/v1/chat/completions",
    *(f"/static/{f}" for f in _STATIC),
}
_PUBLIC_PATHS = {"/", "/healthz", *(f"/static/{f}" for f in _STATIC)}


def create_app(served: ServedModel, settings: ServeSettings | None = None) -> FastAPI:
    settings = settings or ServeSettings()
    metrics = Metrics()
    batcher = DynamicBatcher(served, settings, metrics)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        yield
        batcher.close()

    app = FastAPI(
        title="dpmtv", version=__version__, docs_url=None, redoc_url=None, openapi_url=None, lifespan=lifespan
    )
    app.state.served, app.state.settings, app.state.batcher, app.state.metrics = (
        served,
        settings,
        batcher,
        metrics,
    )
    _install_error_handlers(app, metrics)
    _install_middleware(app, settings, metrics)
    _install_routes(app, served, settings, batcher, metrics)
    return app


def _install_error_handlers(app: FastAPI, metrics: Metrics) -> None:
    @app.exception_handler(ApiError)
    async def api_error(request: Request, exc: ApiError) -> JSONResponse:
        metrics.observe_error(exc.kind)
        return exc.response()

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        metrics.observe_error("invalid_request_error")
        code = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code, "http_error")
        message = f"{request.method} {request.url.path}: {exc.detail}"
        return error_response(exc.status_code, message, code=code, kind="invalid_request_error")

    @app.exception_handler(RequestValidationError)
    async def validation_error(request: Request, exc: RequestValidationError) -> JSONResponse:
        metrics.observe_error("invalid_request_error")
        return error_response(
            400, f"invalid request: {exc.errors()}", code="invalid_request", kind="invalid_request_error"
        )


def _install_middleware(app: FastAPI, settings: ServeSettings, metrics: Metrics) -> None:
    @app.middleware("http")
    async def auth_and_count(request: Request, call_next) -> Response:
        path = request.url.path
        if (
            settings.api_key is not None
            and path not in _PUBLIC_PATHS
            and not _authorised(request, settings.api_key)
        ):
            metrics.observe_error("authentication_error")
            response: Response = ApiError(
                401,
                "missing or wrong API key: send 'Authorization: Bearer <key>'",
                code="invalid_api_key",
                kind="authentication_error",
            ).response()
        else:
            try:
                response = await call_next(request)
            except Exception as exc:  # noqa: BLE001 — one failing request must not stop the server
                metrics.observe_error("server_error")
                response = error_response(
                    500,
                    f"internal error: {type(exc).__name__}: {exc}",
                    code="internal_error",
                    kind="server_error",
                )
        metrics.observe_request(path if path in _PATHS else "other", response.status_code)
        return response


def _authorised(request: Request, api_key: str) -> bool:
    scheme, _, token = request.headers.get("authorization", "").partition(" ")
    return scheme.lower() == "bearer" and hmac.compare_digest(token.strip().encode(), api_key.encode())


def _install_routes(
    app: FastAPI, served: ServedModel, settings: ServeSettings, batcher: DynamicBatcher, metrics: Metrics
) -> None:
    @app.get("/", response_class=HTMLResponse)
    async def page() -> HTMLResponse:
        return HTMLResponse(_static_text("index.html"))

    @app.get("/static/{name}")
    async def static(name: str) -> Response:
        if name not in _STATIC:
            raise ApiError(404, f"no static file '{name}'", code="not_found")
        return Response(_static_text(name), media_type=_STATIC[name])

    @app.get("/healthz")
    async def healthz() -> dict:
        return {
            "status": "ok",
            "models": served.model_names,
            "auth_required": settings.api_key is not None,
            "queue_length": batcher.queue_length,
        }

    @app.get("/metrics")
    async def prometheus() -> PlainTextResponse:
        return PlainTextResponse(
            metrics.render(queue_length=batcher.queue_length), media_type="text/plain; version=0.0.4"
        )

    @app.get("/v1/models")
    async def models() -> dict:
        return {"object": "list", "data": model_cards(served), "dpmtv": {"queries": QUERIES_ARE_FREE}}

    @app.get("/v1/models/{name}")
    async def model(name: str) -> dict:
        for card in model_cards(served):
            if card["id"] == name:
                return card
        raise ApiError(
            404,
            f"model '{name}' is not served here; choose one of: {', '.join(served.model_names)}",
            code="model_not_found",
            param="model",
        )

    @app.post("/v1/chat/completions")
    async def chat_completions(request: Request) -> Response:
        started = time.perf_counter()
        chat = parse_chat_request(await _read_body(request, settings.max_body_bytes))
        row = row_request(chat, served, settings)
        try:
            job = batcher.submit(row)
        except QueueFullError as exc:
            raise ApiError(429, str(exc), code="queue_full", kind="rate_limit_error") from None
        completion = _Completion(chat.model)
        if chat.stream:
            return StreamingResponse(
                _stream(job, completion, metrics, started),
                media_type="text/event-stream",
                headers={"Cache-Control": "no-cache"},
            )
        result = await _result(job)
        metrics.observe_latency(time.perf_counter() - started)
        return JSONResponse(completion.whole(result))


async def _read_body(request: Request, limit: int) -> bytes:
    """The body, refused as soon as it is known to exceed ``limit`` (declared or streamed)."""
    declared = request.headers.get("content-length")
    too_large = ApiError(413, f"request body exceeds {limit} bytes (--max-body-bytes)", code="body_too_large")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise too_large
    chunks, total = [], 0
    async for chunk in request.stream():
        total += len(chunk)
        if total > limit:
            raise too_large
        chunks.append(chunk)
    return b"".join(chunks)


async def _result(job: Job) -> RowResult:
    while True:
        kind, payload = await job.events.get()
        if kind == "done":
            return payload
        if kind == "error":
            raise payload


class _Completion:
    """OpenAI response bodies for one completion id."""

    def __init__(self, model: str) -> None:
        self.id = f"chatcmpl-{uuid.uuid4().hex}"
        self.created = int(time.time())
        self.model = model

    def whole(self, result: RowResult) -> dict:
        return {
            "id": self.id,
            "object": "chat.completion",
            "created": self.created,
            "model": self.model,
            "system_fingerprint": None,
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": result.text},
                    "finish_reason": result.finish_reason,
                    "logprobs": None,
                }
            ],
            "usage": _usage(result),
        }

    def chunk(self, delta: dict, finish_reason: str | None = None, usage: dict | None = None) -> str:
        body = {
            "id": self.id,
            "object": "chat.completion.chunk",
            "created": self.created,
            "model": self.model,
            "system_fingerprint": None,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish_reason, "logprobs": None}],
        }
        if usage is not None:
            body["usage"] = usage
        return f"data: {json.dumps(body)}\n\n"


async def _stream(job: Job, completion: _Completion, metrics: Metrics, started: float) -> AsyncIterator[str]:
    """Server-sent events: a role chunk, text deltas as tokens decode, the finish chunk, [DONE]."""
    yield completion.chunk({"role": "assistant", "content": ""})
    sent = ""
    while True:
        kind, payload = await job.events.get()
        if kind == "text":
            sent += payload
            yield completion.chunk({"content": payload})
        elif kind == "done":
            rest = payload.text[len(sent) :] if payload.text.startswith(sent) else ""
            if rest:
                yield completion.chunk({"content": rest})
            metrics.observe_latency(time.perf_counter() - started)
            yield completion.chunk({}, payload.finish_reason, _usage(payload))
            break
        else:
            metrics.observe_error("server_error")
            error = {
                "message": f"generation failed: {type(payload).__name__}: {payload}",
                "type": "server_error",
                "param": None,
                "code": "internal_error",
            }
            yield f"data: {json.dumps({'error': error})}\n\n"
            break
    yield "data: [DONE]\n\n"


def _usage(result: RowResult) -> dict:
    return {
        "prompt_tokens": result.prompt_tokens,
        "completion_tokens": result.completion_tokens,
        "total_tokens": result.prompt_tokens + result.completion_tokens,
    }


def _static_text(name: str) -> str:
    return resources.files("dpmtv.serve").joinpath("static", name).read_text(encoding="utf-8")
