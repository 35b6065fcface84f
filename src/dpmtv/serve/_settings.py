"""Server limits and batching settings: every bound a request can hit is an option here."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from dpmtv.errors import ParameterError


@dataclass(frozen=True)
class ServeSettings:
    """Safe defaults for a small VLM behind a loopback port; the CLI exposes each one."""

    api_key: str | None = None  # when set, every /v1 and /metrics call needs "Bearer <key>"
    max_body_bytes: int = 8 * 1024 * 1024
    max_image_pixels: int = 4096 * 4096  # width × height, checked from the header before decoding
    max_images: int = 4  # per request
    max_question_chars: int = 4000
    max_tokens: int = 64  # the most a request may ask for
    default_max_tokens: int = 16  # when a request does not say
    max_queue: int = 256  # requests waiting for a batch; one more gets 429
    max_batch_size: int = 32  # 1 turns dynamic batching off
    batch_window_ms: float = 5.0  # how long the first waiting request waits for company
    # PEM public keys: when given, every served vector must be signed by one of them
    trusted_keys: tuple[Path, ...] = ()

    def __post_init__(self) -> None:
        for name in ("max_body_bytes", "max_image_pixels", "max_images", "max_tokens", "max_queue"):
            if getattr(self, name) < 1:
                raise ParameterError(f"{name} must be at least 1, got {getattr(self, name)}")
        if self.max_batch_size < 1:
            raise ParameterError(f"max_batch_size must be at least 1, got {self.max_batch_size}")
        if not 1 <= self.default_max_tokens <= self.max_tokens:
            raise ParameterError(
                f"default_max_tokens must be in [1, max_tokens={self.max_tokens}], "
                f"got {self.default_max_tokens}"
            )
        if self.batch_window_ms < 0:
            raise ParameterError(f"batch_window_ms must be >= 0, got {self.batch_window_ms}")
        if self.api_key is not None and not self.api_key.strip():
            raise ParameterError("api_key is empty; give a non-empty key or none")
