"""Dynamic batching: requests that arrive within a few milliseconds share one forward batch.

The first waiting request waits up to ``batch_window_ms`` for company (less when the batch fills);
then up to ``max_batch_size`` waiting requests with the same number of images (one processor
call needs a uniform image layout) run together on one generation thread — whatever vector each
asked for. While a batch runs, new requests queue; more than ``max_queue`` waiting is refused
(:class:`QueueFullError`, HTTP 429) so a burst cannot grow memory without bound.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections import deque
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from dpmtv.serve._generation import RowRequest, RowResult, generate_rows
from dpmtv.serve._metrics import Metrics
from dpmtv.serve._served import ServedModel
from dpmtv.serve._settings import ServeSettings


class QueueFullError(Exception):
    """More requests are waiting than ``max_queue`` allows."""


@dataclass
class Job:
    """One request in flight. ``events`` receives ("text", str) deltas, then ("done", RowResult) or
    ("error", exception)."""

    row: RowRequest
    events: asyncio.Queue = field(default_factory=asyncio.Queue)
    enqueued_at: float = field(default_factory=time.perf_counter)

    @property
    def image_count(self) -> int:
        return len(self.row.example.images)


class DynamicBatcher:
    def __init__(self, served: ServedModel, settings: ServeSettings, metrics: Metrics) -> None:
        self.served = served
        self.settings = settings
        self.metrics = metrics
        self._pending: deque[Job] = deque()
        self._wakeup: asyncio.Event | None = None
        self._task: asyncio.Task | None = None
        # One generation thread: the model runs one batch at a time; the event loop stays free.
        self._executor = ThreadPoolExecutor(1, thread_name_prefix="dpmtv-generate")
        self._lock = threading.Lock()

    @property
    def queue_length(self) -> int:
        return len(self._pending)

    def submit(self, row: RowRequest) -> Job:
        if len(self._pending) >= self.settings.max_queue:
            raise QueueFullError(
                f"the server is busy: {len(self._pending)} requests are waiting (limit --max-queue "
                f"{self.settings.max_queue}); retry shortly"
            )
        job = Job(row)
        self._pending.append(job)
        self._ensure_running()
        self._wakeup.set()
        return job

    def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
        self._executor.shutdown(wait=False, cancel_futures=True)

    def _ensure_running(self) -> None:
        loop = asyncio.get_running_loop()
        if self._task is None or self._task.done() or self._task.get_loop() is not loop:
            self._wakeup = asyncio.Event()
            self._task = loop.create_task(self._run(), name="dpmtv-batcher")

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            if not self._pending:
                self._wakeup.clear()
                await self._wakeup.wait()
                continue
            if len(self._pending) < self.settings.max_batch_size and self.settings.batch_window_ms > 0:
                await asyncio.sleep(self.settings.batch_window_ms / 1000)
            batch = self._take_batch()
            await loop.run_in_executor(self._executor, self._generate, batch, loop)

    def _take_batch(self) -> list[Job]:
        """Up to max_batch_size waiting jobs with the oldest job's image count, oldest first."""
        images = self._pending[0].image_count
        batch, rest = [], deque()
        while self._pending:
            job = self._pending.popleft()
            fits = job.image_count == images and len(batch) < self.settings.max_batch_size
            (batch if fits else rest).append(job)
        self._pending.extendleft(reversed(rest))
        return batch

    def _generate(self, batch: Sequence[Job], loop: asyncio.AbstractEventLoop) -> None:
        def on_text(row: int, text: str) -> None:
            loop.call_soon_threadsafe(batch[row].events.put_nowait, ("text", text))

        self.metrics.observe_batch(len(batch))
        try:
            results: list[RowResult] = generate_rows(self.served, [job.row for job in batch], on_text)
        except Exception as exc:  # noqa: BLE001 — every waiting client gets the failure, the server lives on
            for job in batch:
                loop.call_soon_threadsafe(job.events.put_nowait, ("error", exc))
            return
        for job, result in zip(batch, results, strict=True):
            loop.call_soon_threadsafe(job.events.put_nowait, ("done", result))
