"""blend_heads_per_row: the per-row masked overwrite used by every batched head search."""

from __future__ import annotations

import pytest
import torch

from dpmtv.errors import HeadSpecError
from dpmtv.forward.hooks import LayerPatch, blend_heads_per_row, overwrite_heads
from dpmtv.selection._data import make_queries
from tests._tolerance import assert_close_to_scale


@pytest.fixture(scope="module")
def setup(planted, public_records):
    loaded, task = planted
    inputs = loaded.adapter.encode([task.train[0].prompt] * 3)
    return loaded.adapter, task.means, inputs


def _logits(adapter, inputs):
    with torch.no_grad():
        return adapter.model(**inputs).logits[:, -1]


def test_zero_mask_is_bitwise_a_no_op(setup):
    adapter, means, inputs = setup
    before = _logits(adapter, inputs)
    with blend_heads_per_row(adapter, dict(enumerate(means)), torch.zeros(3, 2, 4)):
        after = _logits(adapter, inputs)
    assert torch.equal(before, after)


def test_each_row_gets_its_own_subset(setup):
    adapter, means, inputs = setup
    masks = torch.zeros(3, 2, 4)
    masks[1, 0, 1] = 1.0
    masks[2, 1, [2, 3]] = 1.0
    with blend_heads_per_row(adapter, dict(enumerate(means)), masks):
        blended = _logits(adapter, inputs)
    assert torch.equal(blended[0], _logits(adapter, inputs)[0])
    with overwrite_heads(adapter, {0: LayerPatch(torch.tensor([1]), means[0, [1]])}):
        assert_close_to_scale(blended[1], _logits(adapter, inputs)[1])
    with overwrite_heads(adapter, {1: LayerPatch(torch.tensor([2, 3]), means[1, [2, 3]])}):
        assert_close_to_scale(blended[2], _logits(adapter, inputs)[2])


def test_mask_gradient_is_the_first_order_effect(setup):
    adapter, means, inputs = setup
    masks = torch.zeros(1, 2, 4, requires_grad=True)
    single = {key: value[:1] for key, value in inputs.items() if key != "pixel_values"}
    single["pixel_values"] = inputs["pixel_values"][:1]
    with torch.enable_grad(), blend_heads_per_row(adapter, dict(enumerate(means)), masks):
        out = adapter.model(**single).logits[0, -1, 5]
        (grad,) = torch.autograd.grad(out, masks)
    step = torch.zeros(1, 2, 4)
    step[0, 1, 2] = 1e-3
    with torch.no_grad(), blend_heads_per_row(adapter, dict(enumerate(means)), step):
        moved = adapter.model(**single).logits[0, -1, 5]
    with torch.no_grad():
        base = adapter.model(**single).logits[0, -1, 5]
    assert float((moved - base) / 1e-3) == pytest.approx(float(grad[0, 1, 2]), rel=1e-2, abs=1e-4)


def test_bad_shapes_are_refused_and_hooks_always_removed(setup):
    adapter, means, inputs = setup
    with pytest.raises(HeadSpecError, match="masks have shape"):
        with blend_heads_per_row(adapter, {0: means[0]}, torch.zeros(3, 4)):
            pass
    with pytest.raises(HeadSpecError, match="values have shape"):
        with blend_heads_per_row(adapter, {0: means[0, :2]}, torch.zeros(3, 2, 4)):
            pass
    with pytest.raises(RuntimeError, match="boom"):
        with blend_heads_per_row(adapter, dict(enumerate(means)), torch.zeros(3, 2, 4)):
            raise RuntimeError("boom")
    assert not any(o_proj._forward_pre_hooks for o_proj in adapter.o_projs)


def test_first_answer_token_skips_the_template_space(planted, public_records):
    loaded, _ = planted
    (query,) = make_queries(loaded.adapter, public_records[:1])
    assert loaded.adapter.tokenizer.decode([query.target]) == "Z"
