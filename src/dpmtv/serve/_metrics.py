"""Prometheus metrics through ``prometheus_client``, in a registry of the app's own (two apps in
one process, as in the tests, never share counts). Per-model series carry the name the client
asked for: a served vector's name or the bare model's."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

LATENCY_BUCKETS_S = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128)
CONTENT_TYPE = CONTENT_TYPE_LATEST


class Metrics:
    """prometheus_client's metrics are thread-safe: the generation thread updates them too."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.requests = Counter(
            "dpmtv_requests", "HTTP requests by path and status code.", ["path", "status"], registry=r
        )
        self.errors = Counter("dpmtv_errors", "Error responses by OpenAI error type.", ["type"], registry=r)
        self.batch_size = Histogram(
            "dpmtv_batch_size", "Requests per generation batch.", buckets=BATCH_BUCKETS, registry=r
        )
        self.latency = Histogram(
            "dpmtv_request_latency_seconds",
            "Chat completion latency, receipt to last token, per model.",
            ["model"],
            buckets=LATENCY_BUCKETS_S,
            registry=r,
        )
        self.first_token = Histogram(
            "dpmtv_time_to_first_token_seconds",
            "Receipt to the first decoded text, per model.",
            ["model"],
            buckets=LATENCY_BUCKETS_S,
            registry=r,
        )
        self.tokens = Counter(
            "dpmtv_generated_tokens", "Completion tokens generated, per model.", ["model"], registry=r
        )
        self.cancelled = Counter(
            "dpmtv_cancelled_requests",
            "Requests whose client disconnected, by model and whether generation had started.",
            ["model", "started"],
            registry=r,
        )
        self.queue_length = Gauge("dpmtv_queue_length", "Requests waiting for a batch.", registry=r)
        self.pixels_in_flight = Gauge(
            "dpmtv_pixels_in_flight", "Decoded image pixels held by admitted requests.", registry=r
        )

    def observe_request(self, path: str, status: int) -> None:
        self.requests.labels(path=path, status=str(status)).inc()

    def observe_error(self, error_type: str) -> None:
        self.errors.labels(type=error_type).inc()

    def observe_batch(self, size: int) -> None:
        self.batch_size.observe(size)

    def observe_latency(self, model: str, seconds: float) -> None:
        self.latency.labels(model=model).observe(seconds)

    def observe_first_token(self, model: str, seconds: float) -> None:
        self.first_token.labels(model=model).observe(seconds)

    def observe_tokens(self, model: str, count: int) -> None:
        self.tokens.labels(model=model).inc(count)

    def observe_cancelled(self, model: str, *, started: bool) -> None:
        self.cancelled.labels(model=model, started=str(started).lower()).inc()

    def render(self, *, queue_length: int, pixels_in_flight: int) -> bytes:
        self.queue_length.set(queue_length)
        self.pixels_in_flight.set(pixels_in_flight)
        return generate_latest(self.registry)
