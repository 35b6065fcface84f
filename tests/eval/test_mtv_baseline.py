"""The non-private ``mtv`` baseline is MTV (Huang et al. 2024): the plain mean of the chunk
activations, never clipped."""

from __future__ import annotations

import contextlib

import numpy as np
import pytest

import dpmtv.eval.methods
from dpmtv.eval import EvalSettings, LoadOptions, load_record_files
from dpmtv.eval.methods import MethodContext, MethodSpec, run_mtv
from dpmtv.heads import parse_head_spec
from tests.conftest import write_records


@pytest.fixture
def record_benchmark(tmp_path):
    private = write_records(tmp_path / "private", 8)
    queries = write_records(tmp_path / "queries", 2, seed=1)
    return load_record_files(private, queries, LoadOptions())


def _mtv_vector(loaded, benchmark, l2_clip_norm, monkeypatch):
    captured = []

    def answer_encoded(loaded, batches, *, vector=None, **_):
        captured.append(vector)
        return ["" for batch in batches for _ in batch["input_ids"]]

    monkeypatch.setattr(dpmtv.eval.methods, "answer_encoded", answer_encoded)
    settings = EvalSettings(
        methods=(MethodSpec("mtv"),), l2_clip_norm=(l2_clip_norm,), shots_per_chunk=2,
        allow_non_private=True, progress=False,
    )  # fmt: skip
    heads = parse_head_spec("layers:0", loaded.adapter.geometry)
    ctx = MethodContext(loaded, benchmark, settings, heads, "layers:0", lambda *_: contextlib.nullcontext())
    run_mtv(ctx, seed=0)
    return captured[0]


def test_mtv_is_the_plain_mean_whatever_the_clip_norm(tiny_llava, record_benchmark, monkeypatch):
    tiny = _mtv_vector(tiny_llava, record_benchmark, 1e-6, monkeypatch)
    large = _mtv_vector(tiny_llava, record_benchmark, 1e6, monkeypatch)
    np.testing.assert_array_equal(tiny.values, large.values)  # the clip norm plays no part
    assert np.linalg.norm(tiny.values) > 1e-3  # ≫ the 1e-6 a clipped mean could reach
    assert tiny.metadata.privacy.private is False and tiny.metadata.privacy.noise_std == 0
