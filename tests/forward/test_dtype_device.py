"""Lower-precision forward passes keep the privacy arithmetic in float64 on the CPU: bfloat16 and
float16 extraction give clipped sums close to float32's, and ``--device auto`` loads where torch
can run."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from dpmtv.data import load_records
from dpmtv.forward.executor import LocalExecutor
from dpmtv.heads import parse_head_spec
from dpmtv.models.loading import load_model, resolve_device
from dpmtv.pipeline.build import BuildSettings, reference_activations
from dpmtv.pipeline.plan import plan_layout
from dpmtv.pipeline.tasks import ChunkJob, ClippedSum
from dpmtv.privacy.release import release_without_noise
from tests.conftest import write_records

SETTINGS = BuildSettings(
    epsilon=1.0, delta=1e-5, l2_clip_norm=(50.0,), shots_per_chunk=3, insecure_seed=2,
    allow_insecure_seed=True, progress=False, max_prompt_tokens=4096,
)  # fmt: skip
# bfloat16 keeps 8 bits of mantissa (relative rounding 2^-9 per op): on the tiny LLaVA the clipped
# sum moves by 0.3% (float16: 0.04%); 2% leaves room for other CPUs without hiding a wrong dtype
# path (which moves it by O(1)).
HALF_PRECISION_REL = 0.02


def _clipped_sum(loaded, records) -> np.ndarray:
    heads = parse_head_spec("all", loaded.adapter.geometry)
    layout = plan_layout(loaded, records, heads, SETTINGS)
    reference = reference_activations(loaded, heads, SETTINGS)
    job = ChunkJob(heads, SETTINGS, reference, layout.l2_clip_norms)
    total = LocalExecutor().run(loaded, records, layout.release_part, ClippedSum(job))
    num_chunks = layout.release_part.num_chunks
    layers = release_without_noise(total.mean(num_chunks=num_chunks), allow_non_private=True).layers
    assert all(values.dtype == np.float64 for values in layers.values())  # sums in float64
    return np.concatenate([layers[layer] for layer in sorted(layers)]) * num_chunks


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_half_precision_extraction_gives_clipped_sums_close_to_float32(tiny_llava_path, tmp_path, dtype):
    records = load_records(write_records(tmp_path, 12))
    full = _clipped_sum(load_model(tiny_llava_path, dtype="float32"), records)
    half = _clipped_sum(load_model(tiny_llava_path, dtype=dtype), records)
    assert np.linalg.norm(half - full) <= HALF_PRECISION_REL * np.linalg.norm(full)
    assert np.linalg.norm(full) > 1.0  # a real signal was compared, not zeros


def test_auto_device_is_the_gpu_only_when_torch_sees_one(tiny_llava_path):
    expected = "cuda" if torch.cuda.is_available() else "cpu"
    assert resolve_device("auto") == expected
    loaded = load_model(tiny_llava_path, device="auto")
    assert next(loaded.model.parameters()).device.type == expected
    assert dataclasses.is_dataclass(loaded)


def test_device_map_dispatch_extracts_and_patches_like_a_plain_load(tiny_llava_path, tmp_path):
    """A model placed by a device map (accelerate's dispatch: hooks that move each module's inputs
    and weights to its device) extracts the same clipped sums and answers the same with the vector
    patched in. No GPU here, so the second device is accelerate's disk offload: the vision tower's,
    the embeddings' and layer 1's weights are loaded on the fly by accelerate's hooks (around the
    o_proj hooks of dpmtv), and the inputs go where accelerate runs the embeddings."""
    pytest.importorskip("accelerate")
    from accelerate import dispatch_model

    from dpmtv.inference import apply
    from dpmtv.pipeline.build import build_task_vector

    records = load_records(write_records(tmp_path, 12))
    plain, mapped = load_model(tiny_llava_path), load_model(tiny_llava_path, device="map:auto")
    assert next(mapped.model.parameters()).device.type == "cpu"  # map:auto on a CPU-only machine
    modules = ["model.vision_tower", "model.multi_modal_projector", "model.language_model.embed_tokens",
               "model.language_model.layers.0", "model.language_model.layers.1",
               "model.language_model.norm", "model.language_model.rotary_emb", "lm_head"]  # fmt: skip
    offloaded = ("model.vision_tower", "model.language_model.embed_tokens", "model.language_model.layers.1")
    device_map = {name: "disk" if name in offloaded else "cpu" for name in modules}
    dispatch_model(mapped.model, device_map=device_map, offload_dir=str(tmp_path / "offload"))
    assert mapped.adapter.o_projs[1].weight.device.type == "meta"  # offloaded: accelerate loads it
    assert next(mapped.model.parameters()).device.type == "meta"
    assert mapped.adapter.input_device == torch.device("cpu")  # where accelerate runs the embeddings
    full = _clipped_sum(plain, records)
    np.testing.assert_allclose(_clipped_sum(mapped, records), full, rtol=0, atol=1e-5 * np.abs(full).max())

    heads = parse_head_spec("layers:0-1", plain.adapter.geometry)
    vector = build_task_vector(plain, records, heads, dataclasses.replace(SETTINGS, epsilon=8.0)).vector
    inputs = plain.adapter.encode([_zero_shot(records[0])])
    logits = {}
    for name, loaded in (("plain", plain), ("mapped", mapped)):
        with apply(loaded, vector), torch.no_grad():
            logits[name] = loaded.model(**inputs).logits[0, -1]
    scale = float(logits["plain"].abs().max())
    torch.testing.assert_close(logits["mapped"], logits["plain"], rtol=0, atol=1e-5 * scale)


def _zero_shot(record):
    from dpmtv.data.prompts import Example, zero_shot

    return zero_shot(Example(record.load_images(), record.question))
