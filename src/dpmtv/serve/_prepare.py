"""A chat completion from its body to a row ready for a batch: on the event loop when it is small,
in the prepare pool when it is not.

Everything a request costs before its batch — the JSON and its schema, the base64 and the image
headers, admission by decoded pixels, decoding and reducing the images — is bounded before it runs
on the event loop: a body of at most ``INLINE_BODY_BYTES`` is parsed and checked there, and its
images are decoded there when they hold at most ``INLINE_PIXELS`` in all (by their headers); a
larger body, or larger images, go to ``prepare_workers`` threads, so health checks and other
clients are served while a large body is parsed (the loop used to parse every body itself:
``/healthz`` waited up to 2.6 s behind four 4096² JPEGs). A small request costs less than the
hop: preparing a chat completion with one 24² PNG takes about 0.2 ms, and with this and the direct
routes (:mod:`dpmtv.serve._app`) the server's CPU per request, generation replaced by a constant,
fell from 0.98–1.19 to 0.65–0.79 ms (``benchmarks/results/serve_http_path_side_by_side.json``).
The processor runs once per batch on the generation thread: encoding each
row here instead was measured 3.7× the processor time (a fixed cost per call). ``preparing``
counts the requests in the pool, so that the batcher can let them join the next batch
(:mod:`dpmtv.serve._batcher`).
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from functools import partial
from typing import cast

from dpmtv.data.prompts import Prompt
from dpmtv.serve._admission import PixelBudget
from dpmtv.serve._choices import ChoicesRequest, prepared_choices
from dpmtv.serve._completions import CompletionRequest, completion_rows
from dpmtv.serve._generation import RowRequest
from dpmtv.serve._requests import ChatRequest, PlannedRow, parse_chat_request, plan_row, row_requests
from dpmtv.serve._served import ServedModel
from dpmtv.serve._settings import ServeSettings

# What the event loop prepares itself: parsing 64 KiB of JSON takes well under a millisecond, and
# decoding 256² pixels at most about 2 ms (a noisy 256² PNG; 0.4 ms as a JPEG)
INLINE_BODY_BYTES = 64 * 1024
INLINE_PIXELS = 256 * 256


@dataclass(frozen=True)
class Prepared:
    chat: ChatRequest
    rows: tuple[RowRequest, ...]  # one per choice, their images decoded and reduced
    pixels_held: int  # what the request holds in the pixel budget until it finishes


class RequestPreparer:
    def __init__(
        self,
        served: ServedModel,
        settings: ServeSettings,
        pixels: PixelBudget,
        retry_after_s: Callable[[], float],
    ) -> None:
        self.served, self.settings, self.pixels = served, settings, pixels
        self.retry_after_s = retry_after_s
        self.pool = ThreadPoolExecutor(settings.prepare_workers, thread_name_prefix="dpmtv-prepare")
        self.preparing = 0  # requests handed to the pool and not yet back (event loop only)

    async def __call__(self, body: bytes) -> Prepared:
        """The prepared request (or its ApiError): on the event loop when it is small (module
        docstring), else in the pool. A request abandoned while a worker prepares it gives back,
        when the worker finishes (or is cancelled before it starts), the pixels it holds."""
        if len(body) > INLINE_BODY_BYTES:
            return await self._in_pool(self.prepare, body)
        chat, planned, held = self._admitted(body)
        if planned.pixels <= INLINE_PIXELS:
            return self._decoded(chat, planned, held)
        return await self._in_pool(self._decoded, chat, planned, held, held=held)

    def prepare(self, body: bytes) -> Prepared:
        return self._decoded(*self._admitted(body))

    def _admitted(self, body: bytes) -> tuple[ChatRequest, PlannedRow, int]:
        """Parse and check the body, read its images' headers and hold their pixels."""
        chat = parse_chat_request(body)
        planned = plan_row(chat, self.served, self.settings)
        return chat, planned, self.pixels.admit(planned.pixels, retry_after_s=self.retry_after_s())

    def _decoded(self, chat: ChatRequest, planned: PlannedRow, held: int) -> Prepared:
        """Decode and reduce the images; hold only the pixels kept (all released on an error)."""
        try:
            rows = row_requests(
                planned, min_side=self.served.image_min_side, cancelled=threading.Event(), stream=chat.stream
            )
            prompt = cast(Prompt, rows[0].prompt)  # a chat row's prompt is a conversation
            kept = sum(image.width * image.height for image in prompt.all_images())
            self.pixels.release(held - kept)
            held = kept
        except BaseException:
            self.pixels.release(held)
            raise
        return Prepared(chat, rows, held)

    async def _in_pool(self, function: Callable[..., Prepared], *args: object, held: int = 0) -> Prepared:
        """``function(*args)`` on a prepare thread; ``held``: the pixels the request already holds."""
        future = self.pool.submit(function, *args)
        self.preparing += 1
        try:
            return await asyncio.wrap_future(future)
        except asyncio.CancelledError:
            future.add_done_callback(partial(self._release_abandoned, held))
            raise
        finally:
            self.preparing -= 1

    async def completion(self, body: bytes) -> tuple[CompletionRequest, tuple[RowRequest, ...]]:
        """A text completion's request and rows, checked in the pool (no images to admit)."""
        return await asyncio.wrap_future(self.pool.submit(completion_rows, body, self.served, self.settings))

    async def choices(self, body: bytes) -> tuple[ChoicesRequest, Prompt]:
        """A closed-answer request and its decoded conversation (:mod:`dpmtv.serve._choices`)."""
        return await asyncio.wrap_future(self.pool.submit(prepared_choices, body, self.served, self.settings))

    def close(self) -> None:
        self.pool.shutdown(wait=False, cancel_futures=True)

    def _release_abandoned(self, held: int, future: Future[Prepared]) -> None:
        """The pixels of a request whose client left: those it held when its work never ran, or
        those the work kept (an error released them itself)."""
        if future.cancelled():
            self.pixels.release(held)
        elif future.exception() is None:
            self.pixels.release(future.result().pixels_held)
