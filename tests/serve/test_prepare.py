"""Where a request is prepared: small ones on the event loop, large ones in the pool, and the
pixels a request holds come back whichever way it ends.

Each test first fills every prepare thread with a task that waits on an event, so that work sent
to the pool cannot start until the test releases it: what completes meanwhile ran on the loop.
"""

from __future__ import annotations

import asyncio
import base64
import io
import json
import threading

import numpy as np
import pytest
from PIL import Image

from dpmtv.serve import ServeSettings
from dpmtv.serve._admission import PixelBudget
from dpmtv.serve._prepare import INLINE_BODY_BYTES, INLINE_PIXELS, RequestPreparer
from tests.serve.conftest import chat_body

WAIT_S = 30.0


def _preparer(served) -> tuple[RequestPreparer, threading.Event]:
    settings = ServeSettings(prepare_workers=2)
    preparer = RequestPreparer(served, settings, PixelBudget(settings.max_pixels_in_flight), lambda: 1.0)
    release = threading.Event()
    for _ in range(settings.prepare_workers):
        preparer.pool.submit(release.wait, WAIT_S)
    return preparer, release


def _smooth_png(side: int) -> str:
    """A gradient: many pixels in few bytes (a 300² one is about 1 KB)."""
    ramp = np.linspace(0, 255, side, dtype=np.uint8)
    pixels = np.stack([np.tile(ramp, (side, 1))] * 3, -1)
    buffer = io.BytesIO()
    Image.fromarray(pixels).save(buffer, format="PNG")
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode()


def _body(served, *, side: int, padding: int = 0) -> bytes:
    body = chat_body(served.name)
    body["messages"][0]["content"][1]["image_url"]["url"] = _smooth_png(side)
    if padding:
        body["user"] = "x" * padding  # an OpenAI field dpmtv accepts: makes the body large, not the image
    return json.dumps(body).encode()


def test_a_small_request_is_prepared_while_every_prepare_thread_is_busy(served):
    preparer, release = _preparer(served)
    body = _body(served, side=20)
    assert len(body) <= INLINE_BODY_BYTES and 20 * 20 <= INLINE_PIXELS

    async def prepare():
        return await preparer(body)

    try:
        prepared = asyncio.run(asyncio.wait_for(prepare(), WAIT_S))
    finally:
        release.set()
        preparer.close()
    assert prepared.rows[0].prompt.all_images()[0].size == (20, 20)
    assert preparer.pixels.held == prepared.pixels_held == 400


@pytest.mark.parametrize("case", ["many pixels", "large body"])
def test_a_large_request_waits_for_the_pool_and_gives_its_pixels_back_when_its_client_leaves(served, case):
    """Many pixels: the header check admits the pixels on the loop and the decoding waits for a
    thread; the client leaves first, so the pixels come back without the decoding ever running.
    A large body: nothing is parsed on the loop."""
    preparer, release = _preparer(served)
    side = 300 if case == "many pixels" else 20
    body = _body(served, side=side, padding=INLINE_BODY_BYTES if case == "large body" else 0)
    if case == "many pixels":
        assert side * side > INLINE_PIXELS and len(body) <= INLINE_BODY_BYTES
    else:
        assert len(body) > INLINE_BODY_BYTES
    seen: list[int] = []

    async def leave_while_waiting():
        task = asyncio.ensure_future(preparer(body))
        await asyncio.sleep(0.05)  # the loop's share ran; the rest waits for a thread
        assert not task.done()
        seen.append(preparer.pixels.held)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    try:
        asyncio.run(leave_while_waiting())
    finally:
        release.set()
        preparer.close()
    assert seen == [side * side if case == "many pixels" else 0]  # held while waiting, not decoded
    preparer.pool.shutdown(wait=True)
    assert preparer.pixels.held == 0


def test_a_large_request_is_prepared_in_the_pool(served):
    preparer, release = _preparer(served)
    release.set()  # threads free: the request completes there
    body = _body(served, side=300)
    decoded_on: list[str] = []
    decode = preparer._decoded

    def recorded(*args):
        decoded_on.append(threading.current_thread().name)
        return decode(*args)

    preparer._decoded = recorded  # type: ignore[method-assign]

    async def prepare():
        return await preparer(body)

    try:
        prepared = asyncio.run(asyncio.wait_for(prepare(), WAIT_S))
    finally:
        preparer.close()
    assert len(decoded_on) == 1 and decoded_on[0].startswith("dpmtv-prepare")
    kept = prepared.rows[0].prompt.all_images()[0]
    assert preparer.pixels.held == prepared.pixels_held == kept.width * kept.height
