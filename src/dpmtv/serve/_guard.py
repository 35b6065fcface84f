"""The ASGI layer in front of every route: Host and Origin checks, CORS, bearer auth, request
counts, and the last-resort 500.

Host: a server without an API key answers only requests whose ``Host`` is an allowed name
(loopback by default), so a page on another site that rebinds its DNS name to 127.0.0.1 cannot
call it. Origin: a browser request from another origin (the ``Origin`` header) is refused unless
that origin is allowed; allowed origins get CORS headers and preflight answers. Same-origin
requests (the page at ``/``) pass. The 500 names only the exception's type: a message can hold
what a library ran (a command line, a path), and the server log has the traceback.
"""

from __future__ import annotations

import hmac
import logging
import re
from urllib.parse import urlsplit

from starlette.datastructures import Headers
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from dpmtv.serve._errors import ApiError, error_response
from dpmtv.serve._metrics import Metrics
from dpmtv.serve._settings import ServeSettings

logger = logging.getLogger("dpmtv.serve")
_CORS_METHODS = "GET, POST, OPTIONS"
_CORS_HEADERS = "Authorization, Content-Type"


class Guard:
    def __init__(
        self, app: ASGIApp, *, settings: ServeSettings, metrics: Metrics, paths: set[str], public: set[str]
    ) -> None:
        self.app, self.settings, self.metrics = app, settings, metrics
        self.paths, self.public = paths, public

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = Headers(scope=scope)
        path = scope["path"]
        status: list[int] = []
        cors = self._cors_headers(headers)

        async def counted_send(message: Message) -> None:
            if message["type"] == "http.response.start":
                status.append(message["status"])
                message = {**message, "headers": [*message.get("headers", []), *cors]}
            await send(message)

        refusal = self._refusal(scope, headers)
        if refusal is not None:
            self.metrics.observe_error(refusal.kind)
            await refusal.response()(scope, receive, counted_send)
        elif scope["method"] == "OPTIONS" and "access-control-request-method" in headers and cors:
            await send({"type": "http.response.start", "status": 204, "headers": cors})
            await send({"type": "http.response.body", "body": b""})
            status.append(204)
        else:
            await self._call(scope, receive, counted_send, status)
        self.metrics.observe_request(path if path in self.paths else "other", status[0] if status else 0)

    async def _call(self, scope: Scope, receive: Receive, send: Send, status: list[int]) -> None:
        try:
            await self.app(scope, receive, send)
        except Exception as exc:  # noqa: BLE001 — one failing request must not stop the server
            logger.exception("internal error answering %s %s", scope["method"], scope["path"])
            self.metrics.observe_error("server_error")
            if status:  # the response had started: nothing more can be sent
                return
            message = f"internal error ({type(exc).__name__}); the server log has the details"
            response = error_response(500, message, code="internal_error", kind="server_error")
            await response(scope, receive, send)

    def _refusal(self, scope: Scope, headers: Headers) -> ApiError | None:
        settings = self.settings
        host = headers.get("host", "")
        if settings.api_key is None and not _host_allowed(host, settings.allowed_hosts):
            return ApiError(
                403,
                f"Host '{host[:100]}' is not allowed on a server without an API key (allowed: "
                f"{', '.join(settings.allowed_hosts)}; add names with --allowed-host)",
                code="host_not_allowed",
                kind="permission_error",
            )
        origin = headers.get("origin")
        if origin is not None and not self._origin_allowed(origin, host):
            return ApiError(
                403,
                f"Origin '{origin[:100]}' is not allowed (same-origin requests are; add origins with "
                "--allowed-origin)",
                code="origin_not_allowed",
                kind="permission_error",
            )
        if settings.api_key is not None and scope["path"] not in self.public:
            if not _authorised(headers, settings.api_key) and scope["method"] != "OPTIONS":
                return ApiError(
                    401,
                    "missing or wrong API key: send 'Authorization: Bearer <key>'",
                    code="invalid_api_key",
                    kind="authentication_error",
                )
        return None

    def _origin_allowed(self, origin: str, host: str) -> bool:
        allowed = self.settings.allowed_origins
        return "*" in allowed or origin in allowed or urlsplit(origin).netloc.lower() == host.lower()

    def _cors_headers(self, headers: Headers) -> list[tuple[bytes, bytes]]:
        """CORS response headers for an allowed cross-origin caller, none otherwise."""
        origin = headers.get("origin")
        allowed = self.settings.allowed_origins
        if origin is None or not ("*" in allowed or origin in allowed):
            return []
        return [
            (b"access-control-allow-origin", origin.encode("latin-1")),
            (b"access-control-allow-methods", _CORS_METHODS.encode()),
            (b"access-control-allow-headers", _CORS_HEADERS.encode()),
            (b"vary", b"Origin"),
        ]


# Host = a name or an IPv4 address, or an IPv6 literal in brackets, then an optional port, and
# nothing else: a URL parser would read "evil.example@127.0.0.1" (userinfo) or
# "localhost#.evil.example" (a fragment) as a loopback host.
_HOST = re.compile(r"(?P<name>[A-Za-z0-9._-]+|\[[0-9A-Fa-f:.]+\])(?::[0-9]{1,5})?")


def _host_allowed(host: str, allowed: tuple[str, ...]) -> bool:
    if "*" in allowed:
        return True
    match = _HOST.fullmatch(host)
    name = match["name"].strip("[]").lower() if match else None
    return name is not None and name in {a.lower().strip("[]") for a in allowed}


def _authorised(headers: Headers, api_key: str) -> bool:
    scheme, _, token = headers.get("authorization", "").partition(" ")
    return scheme.lower() == "bearer" and hmac.compare_digest(token.strip().encode(), api_key.encode())
