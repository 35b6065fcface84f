"""A chat completion from its body to a row ready for a batch, in the prepare pool.

Everything a request costs before its batch runs on ``prepare_workers`` threads, in one hop,
never on the event loop: the JSON and its schema, the base64 and the image headers, admission by
decoded pixels, decoding and reducing the images. The event loop only reads bodies and writes
answers, so health checks and other clients are served while a large body is parsed (the loop
used to parse bodies itself: ``/healthz`` waited up to 2.6 s behind four 4096² JPEGs). The
processor runs once per batch on the generation thread: encoding each row here instead was
measured 3.7× the processor time (a fixed cost per call), and Python work on any thread shares
one interpreter lock. ``preparing`` counts the requests in the pool, so that the batcher can let
them join the next batch (:mod:`dpmtv.serve._batcher`).
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import cast

from dpmtv.data.prompts import Prompt
from dpmtv.serve._admission import PixelBudget
from dpmtv.serve._choices import ChoicesRequest, prepared_choices
from dpmtv.serve._completions import CompletionRequest, completion_rows
from dpmtv.serve._generation import RowRequest
from dpmtv.serve._requests import ChatRequest, parse_chat_request, plan_row, row_requests
from dpmtv.serve._served import ServedModel
from dpmtv.serve._settings import ServeSettings


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
        """The prepared request (or its ApiError). A request abandoned while a worker prepares it
        gives back, when the worker finishes, the pixels the worker took for it."""
        future = self.pool.submit(self.prepare, body)
        self.preparing += 1
        try:
            return await asyncio.wrap_future(future)
        except asyncio.CancelledError:
            future.add_done_callback(self._release_abandoned)
            raise
        finally:
            self.preparing -= 1

    def prepare(self, body: bytes) -> Prepared:
        chat = parse_chat_request(body)
        planned = plan_row(chat, self.served, self.settings)
        held = self.pixels.admit(planned.pixels, retry_after_s=self.retry_after_s())
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

    async def completion(self, body: bytes) -> tuple[CompletionRequest, tuple[RowRequest, ...]]:
        """A text completion's request and rows, checked in the pool (no images to admit)."""
        return await asyncio.wrap_future(self.pool.submit(completion_rows, body, self.served, self.settings))

    async def choices(self, body: bytes) -> tuple[ChoicesRequest, Prompt]:
        """A closed-answer request and its decoded conversation (:mod:`dpmtv.serve._choices`)."""
        return await asyncio.wrap_future(self.pool.submit(prepared_choices, body, self.served, self.settings))

    def close(self) -> None:
        self.pool.shutdown(wait=False, cancel_futures=True)

    def _release_abandoned(self, future: Future[Prepared]) -> None:
        if not future.cancelled() and future.exception() is None:
            self.pixels.release(future.result().pixels_held)
