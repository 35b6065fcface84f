"""Admission by decoded size: a request's images are counted at the size their headers declare
before anything is decoded, and refused with 429 when the pixels already held by admitted
requests would pass ``--max-pixels-in-flight``. Once an image is decoded and reduced, the request
holds only what it kept, until it finishes. Admitted and released from the prepare pool's
threads and the event loop, under one lock."""

from __future__ import annotations

import math
import threading

from dpmtv.serve._errors import ApiError


class PixelBudget:
    def __init__(self, max_pixels: int) -> None:
        self.max_pixels = max_pixels
        self.held = 0
        self._lock = threading.Lock()

    def admit(self, pixels: int, *, retry_after_s: float) -> int:
        """Hold ``pixels`` or raise the 429 that says how many are held and when to retry."""
        with self._lock:
            held = self.held
            if not pixels or held + pixels <= self.max_pixels:
                self.held = held + pixels
                return pixels
        raise ApiError(
            429,
            f"the server is busy: admitted requests hold {held} decoded pixels and this one "
            f"needs {pixels} (limit --max-pixels-in-flight {self.max_pixels}); retry shortly",
            code="pixels_in_flight",
            kind="rate_limit_error",
            headers={"Retry-After": retry_after(retry_after_s)},
        )

    def release(self, pixels: int) -> None:
        with self._lock:
            self.held -= pixels


def retry_after(seconds: float) -> str:
    """Whole seconds for the Retry-After header, at least 1."""
    return str(max(1, math.ceil(seconds)))
