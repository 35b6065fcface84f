"""Lower-precision forward passes keep the privacy arithmetic in float64 on the CPU: bfloat16 and
float16 extraction give clipped sums close to float32's, and ``--device auto`` loads where torch
can run."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from dpmtv.build import BuildSettings, plan_layout, reference_activations
from dpmtv.data import load_records
from dpmtv.distributed import LocalExecutor
from dpmtv.distributed.executor import ChunkJob, ClippedSum
from dpmtv.heads import parse_head_spec
from dpmtv.models.loading import load_model, resolve_device
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
