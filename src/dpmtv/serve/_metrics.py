"""Prometheus text-format metrics (exposition format 0.0.4), kept by hand: a few counters and
two histograms need no client library."""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Sequence

LATENCY_BUCKETS_S = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128)


class _Histogram:
    def __init__(self, buckets: Sequence[float]) -> None:
        self.buckets = tuple(buckets)
        self.counts = [0] * len(self.buckets)
        self.total = 0.0
        self.count = 0

    def observe(self, value: float) -> None:
        for index, bound in enumerate(self.buckets):
            if value <= bound:
                self.counts[index] += 1
        self.total += value
        self.count += 1

    def lines(self, name: str) -> list[str]:
        out = [f'{name}_bucket{{le="{bound:g}"}} {count}' for bound, count in zip(self.buckets, self.counts)]
        out.append(f'{name}_bucket{{le="+Inf"}} {self.count}')
        out.append(f"{name}_sum {self.total:.6f}")
        out.append(f"{name}_count {self.count}")
        return out


class Metrics:
    """Updated from the event loop and the generation thread, hence the lock."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.requests: Counter[tuple[str, int]] = Counter()  # (path, status)
        self.errors: Counter[str] = Counter()  # error type
        self.batch_size = _Histogram(BATCH_BUCKETS)
        self.latency = _Histogram(LATENCY_BUCKETS_S)

    def observe_request(self, path: str, status: int) -> None:
        with self._lock:
            self.requests[(path, status)] += 1

    def observe_error(self, error_type: str) -> None:
        with self._lock:
            self.errors[error_type] += 1

    def observe_batch(self, size: int) -> None:
        with self._lock:
            self.batch_size.observe(size)

    def observe_latency(self, seconds: float) -> None:
        with self._lock:
            self.latency.observe(seconds)

    def render(self, *, queue_length: int) -> str:
        with self._lock:
            lines = [
                "# HELP dpmtv_requests_total HTTP requests by path and status code.",
                "# TYPE dpmtv_requests_total counter",
                *(
                    f'dpmtv_requests_total{{path="{path}",status="{status}"}} {count}'
                    for (path, status), count in sorted(self.requests.items())
                ),
                "# HELP dpmtv_errors_total Error responses by OpenAI error type.",
                "# TYPE dpmtv_errors_total counter",
                *(
                    f'dpmtv_errors_total{{type="{kind}"}} {count}'
                    for kind, count in sorted(self.errors.items())
                ),
                "# HELP dpmtv_batch_size Requests per generation batch.",
                "# TYPE dpmtv_batch_size histogram",
                *self.batch_size.lines("dpmtv_batch_size"),
                "# HELP dpmtv_request_latency_seconds Chat completion latency, receipt to last token.",
                "# TYPE dpmtv_request_latency_seconds histogram",
                *self.latency.lines("dpmtv_request_latency_seconds"),
                "# HELP dpmtv_queue_length Requests waiting for a batch.",
                "# TYPE dpmtv_queue_length gauge",
                f"dpmtv_queue_length {queue_length}",
            ]
        return "\n".join(lines) + "\n"
