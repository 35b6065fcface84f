"""Server limits and batching settings: every bound a request can hit is an option here."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from dpmtv.errors import ParameterError

LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "::1")


@dataclass(frozen=True)
class ServeSettings:
    """Safe defaults for a small VLM behind a loopback port; the CLI exposes each one."""

    api_key: str | None = None  # when set, every /v1 and /metrics call needs "Bearer <key>"
    max_body_bytes: int = 8 * 1024 * 1024
    max_image_pixels: int = 4096 * 4096  # width × height of one image, read from its header
    max_request_pixels: int = 4 * 4096 * 4096  # the sum over one request's images
    # Decoded pixels held by admitted requests (header size until downscaled, then the kept size).
    max_pixels_in_flight: int = 8 * 4096 * 4096
    max_images: int = 16  # per request (lmms-eval sends up to 11)
    max_question_chars: int = 16_000
    max_tokens: int = 256  # the server's cap: a larger max_tokens is cut here, finish_reason "length"
    default_max_tokens: int = 16  # when a request does not say
    max_queue: int = 256  # requests waiting for a batch; one more gets 429
    max_batch_size: int = 32  # 1 turns dynamic batching off
    batch_window_ms: float = 5.0  # how long a request that finds the server idle waits for company
    prepare_workers: int = 2  # threads that parse, decode and encode requests off the event loop
    # PEM public keys: when given, every served vector must be signed by one of them
    trusted_keys: tuple[Path, ...] = ()
    require_signature: bool = False  # refuse to start without a trusted key (so every vector is verified)
    allowed_hosts: tuple[str, ...] = LOOPBACK_HOSTS  # Host names accepted without an API key; "*": any
    allowed_origins: tuple[str, ...] = ()  # cross-origin callers allowed (CORS); "*": any
    header_timeout_s: float = 10.0  # from a request's first byte (or the connection) to its last header
    body_timeout_s: float = 30.0  # from the last header to the last body byte
    max_connections: int = 512  # open sockets beyond it are closed at once (keep it below `ulimit -n`)

    def __post_init__(self) -> None:
        for name in (
            "max_body_bytes",
            "max_image_pixels",
            "max_request_pixels",
            "max_pixels_in_flight",
            "max_images",
            "max_tokens",
            "max_queue",
            "max_batch_size",
            "max_connections",
            "prepare_workers",
        ):
            if getattr(self, name) < 1:
                raise ParameterError(f"{name} must be at least 1, got {getattr(self, name)}")
        if not 1 <= self.default_max_tokens <= self.max_tokens:
            raise ParameterError(
                f"default_max_tokens must be in [1, max_tokens={self.max_tokens}], "
                f"got {self.default_max_tokens}"
            )
        if self.max_request_pixels > self.max_pixels_in_flight:
            raise ParameterError(
                f"max_request_pixels ({self.max_request_pixels}) must not exceed max_pixels_in_flight "
                f"({self.max_pixels_in_flight}): such a request could never be admitted"
            )
        for name in ("batch_window_ms", "header_timeout_s", "body_timeout_s"):
            if not getattr(self, name) >= 0:
                raise ParameterError(f"{name} must be >= 0, got {getattr(self, name)}")
        if self.api_key is not None:
            check_api_key(self.api_key)
        if self.require_signature and not self.trusted_keys:
            raise ParameterError(
                "require_signature is set but no trusted key is given: add --trusted-key PUB.pem (the "
                "signer's public key), since without one no signature can be verified"
            )


def check_api_key(key: str) -> None:
    """A key clients can actually send: HTTP headers are ASCII and clients strip the token."""
    if not key.strip():
        raise ParameterError("api_key is empty; give a non-empty key or none")
    if key != key.strip():
        raise ParameterError("api_key starts or ends with white space, which no client sends; remove it")
    if not key.isascii() or not key.isprintable():
        bad = next(c for c in key if not (c.isascii() and c.isprintable()))
        raise ParameterError(
            f"api_key holds {bad!r} (U+{ord(bad):04X}); an HTTP header carries printable ASCII only"
        )
    if any(c.isspace() for c in key):
        raise ParameterError("api_key holds white space; a bearer token cannot")
