"""Rows encoded one by one at admission and joined into a batch equal the processor's own batched
call (or are refused by join_rows, and the batch is encoded whole): the model sees the same
tensors either way."""

from __future__ import annotations

import threading

import numpy as np
import pytest
import torch
from PIL import Image

from dpmtv.models.loading import load_model
from dpmtv.prompts import Example
from dpmtv.serve._encoding import encode_rows, join_rows
from dpmtv.serve._generation import RowRequest, batch_inputs, generate_rows
from dpmtv.testing import build_tiny_checkpoint

# Families whose batched processor pads or splits images differently: Qwen2-VL (a token count per
# image size), LLaVA-NeXT (patch counts padded in a batch), SmolVLM (image splitting).
FAMILIES = ("llava", "qwen2_vl", "llava_next", "smolvlm")


def _examples(sizes: list[tuple[int, int]]) -> list[Example]:
    rng = np.random.default_rng(0)
    questions = ["What?", "What colour is the large shape in this picture?", "Name it, please."]
    return [
        Example(
            (Image.fromarray(rng.integers(0, 256, (h, w, 3), dtype=np.uint8)),), questions[i % len(questions)]
        )
        for i, (w, h) in enumerate(sizes)
    ]


@pytest.mark.parametrize("family", FAMILIES)
def test_joined_rows_equal_the_batched_processor_call_or_are_refused(family, tmp_path):
    adapter = load_model(str(build_tiny_checkpoint(family, tmp_path / family))).adapter
    lock = threading.Lock()
    examples = _examples([(20, 20), (40, 24), (24, 48)])
    batched = encode_rows(adapter, examples, lock)
    joined = join_rows(
        [encode_rows(adapter, [e], lock) for e in examples], pad_token_id=adapter.tokenizer.pad_token_id
    )
    if joined is None:  # the batch is encoded whole: nothing to compare
        assert family != "llava", "LLaVA's rows must join (the served path)"
        return
    assert set(joined) == set(batched)
    for key, tensor in batched.items():
        assert joined[key].dtype == tensor.dtype and torch.equal(joined[key], tensor), key


def test_rows_encoded_at_admission_answer_as_a_batch_encoded_whole(served):
    images = _examples([(20, 20), (30, 22), (22, 30), (20, 20)])
    vectors = [served.vectors["colour"], None, served.vectors["shape"], served.vectors["colour"]]
    rows = [
        RowRequest(example, vector, 6, threading.Event())
        for example, vector in zip(images, vectors, strict=True)
    ]
    encoded = [
        RowRequest(
            r.example,
            r.vector,
            r.max_new_tokens,
            threading.Event(),
            inputs=encode_rows(served.loaded.adapter, [r.example], served.encode_lock),
        )
        for r in rows
    ]
    whole = batch_inputs(served, rows)
    joined = batch_inputs(served, encoded)
    assert all(torch.equal(joined[key], whole[key]) for key in whole)
    assert generate_rows(served, encoded) == generate_rows(served, rows)
