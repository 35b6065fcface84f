"""A tiny random-weight LLaVA served with two task vectors built by the real pipeline."""

from __future__ import annotations

import asyncio
import base64
import io

import numpy as np
import pytest
from PIL import Image

from dpmtv.data import load_records
from dpmtv.heads import parse_head_spec
from dpmtv.models.loading import load_model
from dpmtv.pipeline.build import BuildSettings, build_task_vector
from dpmtv.serve import ServeSettings, create_app, load_served_model
from tests.conftest import write_records


@pytest.fixture(scope="session")
def served_vectors(tiny_llava_path, tmp_path_factory):
    """Two artifacts on disk: 'colour' (ε=1, layer 0-1 heads) and 'shape' (non-private, two heads)."""
    folder = tmp_path_factory.mktemp("serve-vectors")
    loaded = load_model(tiny_llava_path)
    records = load_records(write_records(folder / "data", 16))
    specs = {
        "colour": (
            "layers:0-1",
            BuildSettings(epsilon=1.0, delta=1e-5, l2_clip_norm=(2.0,), shots_per_chunk=4, progress=False),
        ),
        "shape": (
            "heads:0.1,1.2",
            BuildSettings(
                epsilon=1.0,
                delta=1e-5,
                l2_clip_norm=(2.0,),
                shots_per_chunk=4,
                non_private=True,
                progress=False,
            ),
        ),
    }
    paths = {}
    for name, (heads, settings) in specs.items():
        head_set = parse_head_spec(heads, loaded.adapter.geometry)
        paths[name] = build_task_vector(
            loaded, records, head_set, settings, out=folder / f"{name}.safetensors"
        ).path
    return paths


# The vector whose answers tests cut at a stop, sample, count and score: built without noise, it
# answers the same in every session. The private 'colour' is drawn afresh each session, and some
# draws make the random-weight model answer an end token first (no text to cut or compare).
STEADY_VECTOR = "shape"


@pytest.fixture(scope="session")
def served(tiny_llava_path, served_vectors):
    return load_served_model(str(tiny_llava_path), sorted(served_vectors.items()))


@pytest.fixture
def make_app(served):
    def make(**settings):
        return create_app(served, ServeSettings(**settings))

    return make


def png_data_url(size=(20, 20), seed=0) -> str:
    rng = np.random.default_rng(seed)
    buffer = io.BytesIO()
    Image.fromarray(rng.integers(0, 256, (*size[::-1], 3), dtype=np.uint8)).save(buffer, format="PNG")
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode()


def chat_body(model: str, *, image_seed: int | None = 0, text: str = "What is shown?", **extra) -> dict:
    content = [{"type": "text", "text": text}]
    if image_seed is not None:
        content.append({"type": "image_url", "image_url": {"url": png_data_url(seed=image_seed)}})
    return {"model": model, "messages": [{"role": "user", "content": content}], **extra}


IN_PROCESS_WAIT_S = 300.0  # not a speed check: the ASGI transport has no timeouts of its own


def run(coroutine):
    """``coroutine`` on a fresh event loop; a request the app never answers fails the test."""
    return asyncio.run(asyncio.wait_for(coroutine, IN_PROCESS_WAIT_S))
