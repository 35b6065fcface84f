"""The FastAPI application: routes, body limits, admission, OpenAI error shape, metrics."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from functools import partial
from importlib import resources
from typing import Any, cast

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, JSONResponse, Response, StreamingResponse
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import ASGIApp, Receive, Scope, Send

from dpmtv._version import __version__
from dpmtv.serve._admission import PixelBudget, retry_after
from dpmtv.serve._batcher import DynamicBatcher, Job, QueueFullError
from dpmtv.serve._choices import score_choices
from dpmtv.serve._completions import completion_body
from dpmtv.serve._errors import ApiError, error_response
from dpmtv.serve._generation import RowResult
from dpmtv.serve._guarantee import QUERIES_ARE_FREE, model_cards
from dpmtv.serve._guard import Guard
from dpmtv.serve._metrics import CONTENT_TYPE, Metrics
from dpmtv.serve._prepare import RequestPreparer
from dpmtv.serve._requests import ChatRequest
from dpmtv.serve._responses import ChatCompletion, stream_chat
from dpmtv.serve._served import ServedModel
from dpmtv.serve._settings import ServeSettings

_STATIC = {"app.js": "text/javascript", "style.css": "text/css"}
_PATHS = {
    "/",
    "/healthz",
    "/health",
    "/metrics",
    "/v1/models",
    "/v1/chat/completions",
    "/v1/completions",
    "/v1/choices",
    *(f"/static/{f}" for f in _STATIC),
}
_PUBLIC_PATHS = {"/", "/healthz", "/health", *(f"/static/{f}" for f in _STATIC)}


class _Disconnected(Exception):
    """The client closed its connection before the answer was ready."""


def create_app(served: ServedModel, settings: ServeSettings | None = None) -> FastAPI:
    settings = settings or ServeSettings()
    metrics = Metrics()
    batcher = DynamicBatcher(served, settings, metrics, preparing=lambda: preparer.preparing)
    pixels = PixelBudget(settings.max_pixels_in_flight)
    # Bodies are parsed, checked and decoded in a pool: the event loop only moves bytes.
    preparer = RequestPreparer(served, settings, pixels, lambda: batcher.retry_after_s)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        yield
        batcher.close()
        preparer.close()

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
    _install_routes(app, served, settings, batcher, metrics)
    direct = _install_chat(app, _Chat(settings, batcher, metrics, pixels, preparer))
    # added first, so inside the Guard: its checks and counts apply to the direct routes too
    app.add_middleware(_DirectRoutes, routes=direct, metrics=metrics)
    app.add_middleware(Guard, settings=settings, metrics=metrics, paths=_PATHS, public=_PUBLIC_PATHS)
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
    @app.get("/health")  # vLLM's name
    async def healthz() -> dict[Any, Any]:  # FastAPI reads these: the same response model as bare dict
        return {
            "status": "ok",
            "models": served.model_names,
            "auth_required": settings.api_key is not None,
            "queue_length": batcher.queue_length,
        }

    @app.get("/metrics")
    async def prometheus(request: Request) -> Response:
        pixels = request.app.state.chat.pixels.held
        body = metrics.render(queue_length=batcher.queue_length, pixels_in_flight=pixels)
        return Response(body, media_type=CONTENT_TYPE)

    @app.get("/v1/models")
    async def models() -> dict[Any, Any]:
        return {"object": "list", "data": model_cards(served), "dpmtv": {"queries": QUERIES_ARE_FREE}}

    @app.get("/v1/models/{name}")
    async def model(name: str) -> dict[Any, Any]:
        for card in model_cards(served):
            if card["id"] == name:
                return card
        raise ApiError(
            404,
            f"model '{name}' is not served here; choose one of: {', '.join(served.model_names)}",
            code="model_not_found",
            param="model",
        )


class _Chat:
    """Everything one chat completion passes through, from the body to the answer."""

    def __init__(
        self,
        settings: ServeSettings,
        batcher: DynamicBatcher,
        metrics: Metrics,
        pixels: PixelBudget,
        preparer: RequestPreparer,
    ) -> None:
        self.settings, self.batcher, self.metrics = settings, batcher, metrics
        self.pixels, self.preparer = pixels, preparer

    async def admit(
        self, request: Request, received: float
    ) -> tuple[ChatRequest, list[Job], Callable[[], None]]:
        """Read the body; parse, check, hold the pixels and decode it in the prepare pool;
        queue its rows (or refuse)."""
        prepared = await self.preparer(await _read_body(request, self.settings))
        chat, held = prepared.chat, prepared.pixels_held
        try:
            jobs = self.batcher.submit(prepared.rows, model=chat.model, received_at=received)
        except QueueFullError as exc:
            self.pixels.release(held)
            headers = {"Retry-After": retry_after(self.batcher.retry_after_s)}
            raise ApiError(
                429, str(exc), code="queue_full", kind="rate_limit_error", headers=headers
            ) from None
        except BaseException:
            self.pixels.release(held)
            raise
        return chat, jobs, partial(self.pixels.release, held)


_Endpoint = Callable[[Request], Awaitable[Response]]


class _DirectRoutes:
    """The POST endpoints, reached straight from the Guard: FastAPI's exception, exit-stack and
    router layers cost the event loop about a sixth of its time per chat completion (py-spy) and
    do nothing for an endpoint that reads its own body. An :class:`ApiError` is answered as the
    app's handler answers it; anything else goes up to the Guard's 500. Other methods on these
    paths go on to the router (405)."""

    def __init__(self, app: ASGIApp, *, routes: dict[str, _Endpoint], metrics: Metrics) -> None:
        self.app, self.routes, self.metrics = app, routes, metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        endpoint = self.routes.get(scope["path"]) if scope["type"] == "http" else None
        if endpoint is None or scope["method"] != "POST":
            await self.app(scope, receive, send)
            return
        try:
            response = await endpoint(Request(scope, receive))
        except ApiError as exc:
            self.metrics.observe_error(exc.kind)
            response = exc.response()
        await response(scope, receive, send)


def _install_chat(app: FastAPI, chat_route: _Chat) -> dict[str, _Endpoint]:
    """Register the POST endpoints (so that other methods get 405) and return them by path for
    :class:`_DirectRoutes`."""
    app.state.chat = chat_route
    metrics = chat_route.metrics

    async def chat_completions(request: Request) -> Response:
        received = time.perf_counter()
        chat, jobs, release = await chat_route.admit(request, received)
        completion = ChatCompletion(chat.model, logprobs=chat.logprobs)
        if chat.stream:  # one choice (n > 1 is refused with stream)
            stream = stream_chat(jobs[0], completion, metrics, received, include_usage=chat.include_usage)
            return StreamingResponse(
                _releasing(stream, jobs[0], release),
                media_type="text/event-stream",
                headers={"Cache-Control": "no-cache"},
            )
        try:
            results = await _results(jobs, request)
        except _Disconnected:
            return Response(status_code=499)  # nginx's "client closed request": nobody reads it
        finally:
            release()
        metrics.observe_latency(chat.model, time.perf_counter() - received)
        return JSONResponse(completion.whole(results))

    async def completions(request: Request) -> Response:
        received = time.perf_counter()
        body = await _read_body(request, chat_route.settings)
        completion, rows = await chat_route.preparer.completion(body)
        try:
            jobs = chat_route.batcher.submit(rows, model=completion.model, received_at=received)
        except QueueFullError as exc:
            headers = {"Retry-After": retry_after(chat_route.batcher.retry_after_s)}
            raise ApiError(
                429, str(exc), code="queue_full", kind="rate_limit_error", headers=headers
            ) from None
        try:
            results = await _results(jobs, request)
        except _Disconnected:
            return Response(status_code=499)
        metrics.observe_latency(completion.model, time.perf_counter() - received)
        return JSONResponse(completion_body(completion, rows, results))

    async def choices(request: Request) -> Response:
        body = await _read_body(request, chat_route.settings)
        parsed, prompt = await chat_route.preparer.choices(body)
        served = request.app.state.served
        return JSONResponse(await chat_route.batcher.between_batches(score_choices, served, parsed, prompt))

    routes: dict[str, _Endpoint] = {
        "/v1/chat/completions": chat_completions,
        "/v1/completions": completions,
        "/v1/choices": choices,
    }
    for path, endpoint in routes.items():
        app.add_route(path, endpoint, methods=["POST"])
    return routes


async def _read_body(request: Request, settings: ServeSettings) -> bytes:
    """The body, refused as soon as it is known to exceed the limit (declared or streamed), or
    when it has not all arrived within ``body_timeout_s``."""
    limit = settings.max_body_bytes
    declared = request.headers.get("content-length")
    too_large = ApiError(413, f"request body exceeds {limit} bytes (--max-body-bytes)", code="body_too_large")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise too_large
    chunks, total = [], 0
    try:
        async with asyncio.timeout(settings.body_timeout_s or None):
            async for chunk in request.stream():
                total += len(chunk)
                if total > limit:
                    raise too_large
                chunks.append(chunk)
    except TimeoutError:
        raise ApiError(
            408,
            f"request body not received within {settings.body_timeout_s:g} s (--body-timeout-s)",
            code="body_timeout",
        ) from None
    return b"".join(chunks)


async def _results(jobs: list[Job], request: Request) -> list[RowResult]:
    """The finished rows, or :class:`_Disconnected` (the jobs cancelled) if the client goes first."""
    answer: asyncio.Future[list[RowResult]] = asyncio.ensure_future(
        asyncio.gather(*(_final(job) for job in jobs))
    )
    gone = asyncio.ensure_future(_disconnect(request))
    waiting: set[asyncio.Future[Any]] = {answer, gone}
    try:
        await asyncio.wait(waiting, return_when=asyncio.FIRST_COMPLETED)
    finally:
        gone.cancel()
        if not answer.done():
            answer.cancel()
            for job in jobs:
                job.cancel()
    if not answer.done() or answer.cancelled():
        raise _Disconnected
    return answer.result()


async def _final(job: Job) -> RowResult:
    while True:
        kind, payload = await job.events.get()
        if kind == "done":
            return cast(RowResult, payload)
        if kind == "error":
            raise payload


async def _disconnect(request: Request) -> None:
    while (await request.receive())["type"] != "http.disconnect":
        pass


async def _releasing(stream: AsyncIterator[str], job: Job, release: Callable[[], None]) -> AsyncIterator[str]:
    """The stream; a client that leaves mid-stream cancels its row, and the pixels are released."""
    try:
        async for event in stream:
            yield event
    finally:
        job.cancel()  # a no-op once the row has finished
        release()


def _static_text(name: str) -> str:
    return resources.files("dpmtv.serve").joinpath("static", name).read_text(encoding="utf-8")
