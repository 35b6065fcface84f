"""OpenAI's error shape, ``{"error": {"message", "type", "param", "code"}}``, for every failure."""

from __future__ import annotations

from fastapi.responses import JSONResponse


class ApiError(Exception):
    """A request the server refuses; ``status`` is the HTTP code, ``code`` a stable machine name."""

    def __init__(
        self,
        status: int,
        message: str,
        *,
        code: str,
        kind: str = "invalid_request_error",
        param: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.headers = headers or {}
        self.status = status
        self.message = message
        self.code = code
        self.kind = kind
        self.param = param

    def response(self) -> JSONResponse:
        headers = {**self.headers, **({"WWW-Authenticate": "Bearer"} if self.status == 401 else {})}
        return error_response(
            self.status, self.message, code=self.code, kind=self.kind, param=self.param, headers=headers
        )


def error_response(
    status: int,
    message: str,
    *,
    code: str,
    kind: str,
    param: str | None = None,
    headers: dict[str, str] | None = None,
) -> JSONResponse:
    body = {"error": {"message": message, "type": kind, "param": param, "code": code}}
    return JSONResponse(body, status_code=status, headers=headers)
