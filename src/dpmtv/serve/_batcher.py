"""Dynamic batching: requests that arrive within a few milliseconds share one forward batch.

A request that finds the server idle waits up to ``batch_window_ms`` for company (less when the
batch fills); then up to ``max_batch_size`` waiting requests with the same number of images (one
processor call needs a uniform image layout) run together on one generation thread — whatever
vector each asked for. Admission is continuous: requests that arrive while a batch runs are
prepared (on the event loop, or in the prepare pool when large) and queue, and when the batch
ends the next one starts with every row waiting, waiting longer (at most the window) only while
requests still in the prepare pool could fill it — on a small model a batch of 8 rows costs about
half what 32 cost (``benchmarks/results/serve_batch_cost.json``), so rows that miss it by a
millisecond would cost most of a batch. More than ``max_queue`` waiting is refused
(:class:`QueueFullError`, HTTP 429 with a Retry-After from the recent batch time) so a burst
cannot grow memory without bound. A job whose client has gone is dropped from the queue, or
stops at its next token when its batch is already running.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, TypeVar, cast

from dpmtv.serve._generation import RowRequest, RowResult, generate_rows
from dpmtv.serve._metrics import Metrics
from dpmtv.serve._served import ServedModel
from dpmtv.serve._settings import ServeSettings
from dpmtv.serve._tracker import TokenLogprob

T = TypeVar("T")


class QueueFullError(Exception):
    """More requests are waiting than ``max_queue`` allows."""


@dataclass
class Job:
    """One row in flight (a request asking for ``n`` choices has ``n``). ``events`` receives
    ("text", (str, log-probability entries)) deltas, then ("done", RowResult) or ("error", exception)."""

    row: RowRequest
    model: str  # the name the client asked for (a metrics label)
    received_at: float  # perf_counter at the request's receipt
    events: asyncio.Queue[tuple[str, Any]] = field(default_factory=asyncio.Queue)
    first_token_at: float | None = None

    def cancel(self) -> None:
        self.row.cancelled.set()

    @property
    def cancelled(self) -> bool:
        return self.row.cancelled.is_set()


class DynamicBatcher:
    def __init__(
        self,
        served: ServedModel,
        settings: ServeSettings,
        metrics: Metrics,
        preparing: Callable[[], int] = lambda: 0,
    ) -> None:
        self.served = served
        self.settings = settings
        self.metrics = metrics
        self.preparing = preparing  # requests being prepared, that will queue in a moment
        self._pending: deque[Job] = deque()
        self._wakeup: asyncio.Event | None = None
        self._task: asyncio.Task[None] | None = None
        # One generation thread: the model runs one batch at a time; the event loop stays free.
        self._executor = ThreadPoolExecutor(1, thread_name_prefix="dpmtv-generate")
        self.batch_seconds = 1.0  # the last batch's generation time, for Retry-After

    @property
    def queue_length(self) -> int:
        return len(self._pending)

    @property
    def retry_after_s(self) -> float:
        """Roughly when a place frees up: the batches ahead of a new request, at the last batch's pace."""
        batches_ahead = 1 + len(self._pending) // self.settings.max_batch_size
        return batches_ahead * self.batch_seconds

    def submit(self, rows: Sequence[RowRequest], *, model: str, received_at: float) -> list[Job]:
        """Queue one request's rows together, or none of them."""
        if len(self._pending) + len(rows) > self.settings.max_queue:
            raise QueueFullError(
                f"the server is busy: {len(self._pending)} requests are waiting (limit --max-queue "
                f"{self.settings.max_queue}); retry shortly"
            )
        jobs = [Job(row, model, received_at) for row in rows]
        self._pending.extend(jobs)
        self._ensure_running()
        self._event.set()
        return jobs

    async def between_batches(self, function: Callable[..., T], *args: Any) -> T:
        """``function(*args)`` on the generation thread, after the running batch (the model's
        hooks belong to one batch at a time)."""
        return await asyncio.get_running_loop().run_in_executor(self._executor, function, *args)

    def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
        self._executor.shutdown(wait=False, cancel_futures=True)

    @property
    def _event(self) -> asyncio.Event:
        return cast(asyncio.Event, self._wakeup)  # set by _ensure_running before _run starts

    def _ensure_running(self) -> None:
        loop = asyncio.get_running_loop()
        if self._task is None or self._task.done() or self._task.get_loop() is not loop:
            self._wakeup = asyncio.Event()
            self._task = loop.create_task(self._run(), name="dpmtv-batcher")

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        busy = False  # a batch has just ended: whoever waits now goes into the next one at once
        while True:
            if not self._pending:
                busy = False
                self._event.clear()
                await self._event.wait()
                continue
            await self._gather(busy=busy)
            batch = self._take_batch()
            if batch:
                started = time.perf_counter()
                await loop.run_in_executor(self._executor, self._generate, batch, loop)
                self.batch_seconds = time.perf_counter() - started
                busy = True

    async def _gather(self, *, busy: bool) -> None:
        """Wait for company: idle, the window; busy (a batch just ended), at most the window and
        only while requests in the prepare pool could still fill the batch."""
        window_s = self.settings.batch_window_ms / 1000
        if window_s <= 0 or len(self._pending) >= self.settings.max_batch_size:
            return
        if not busy:
            await asyncio.sleep(window_s)
            return
        loop = asyncio.get_running_loop()
        deadline = loop.time() + window_s
        while len(self._pending) < self.settings.max_batch_size and self.preparing() > 0:
            self._event.clear()
            try:
                async with asyncio.timeout_at(deadline):
                    await self._event.wait()
            except TimeoutError:
                return

    def _take_batch(self) -> list[Job]:
        """Up to max_batch_size waiting jobs with the oldest job's layout (image count, and chat or
        text prompt), oldest first;
        jobs whose clients have gone are dropped."""
        for job in [job for job in self._pending if job.cancelled]:
            self._pending.remove(job)
            self.metrics.observe_cancelled(job.model, started=False)
        if not self._pending:
            return []
        layout = self._pending[0].row.layout
        batch: list[Job] = []
        rest: deque[Job] = deque()
        while self._pending:
            job = self._pending.popleft()
            fits = job.row.layout == layout and len(batch) < self.settings.max_batch_size
            (batch if fits else rest).append(job)
        self._pending.extendleft(reversed(rest))
        return batch

    def _generate(self, batch: Sequence[Job], loop: asyncio.AbstractEventLoop) -> None:
        def on_first_token(row: int) -> None:
            job = batch[row]
            job.first_token_at = time.perf_counter()
            self.metrics.observe_first_token(job.model, job.first_token_at - job.received_at)

        def on_text(row: int, text: str, logprobs: list[TokenLogprob]) -> None:  # streaming rows only
            loop.call_soon_threadsafe(batch[row].events.put_nowait, ("text", (text, logprobs)))

        self.metrics.observe_batch(len(batch))
        rows = [job.row for job in batch]
        try:
            results: list[RowResult] = generate_rows(self.served, rows, on_text, on_first_token)
        except Exception as exc:  # noqa: BLE001 — every waiting client gets the failure, the server lives on
            for job in batch:
                loop.call_soon_threadsafe(job.events.put_nowait, ("error", exc))
            return
        for job, result in zip(batch, results, strict=True):
            if job.first_token_at is None:  # no text decoded (an end token first): the answer is the first
                self.metrics.observe_first_token(job.model, time.perf_counter() - job.received_at)
            self.metrics.observe_tokens(job.model, result.completion_tokens)
            if result.finish_reason == "cancelled":
                self.metrics.observe_cancelled(job.model, started=True)
        loop.call_soon_threadsafe(_deliver, batch, results)  # one wake-up of the loop per batch


def _deliver(batch: Sequence[Job], results: Sequence[RowResult]) -> None:
    for job, result in zip(batch, results, strict=True):
        job.events.put_nowait(("done", result))
