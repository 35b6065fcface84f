"""The adapter checks that need no processor, for families whose processor cannot be built here
(it requires torchvision): sites resolve, H·d is the projection's input width, capture is
deterministic, overwriting every head with its own value is a bitwise no-op, overwriting two
heads changes the logits, and no hook survives an exception. Inputs are token ids only."""

from __future__ import annotations

import pytest
import torch

from dpmtv.forward.hooks import LayerPatch, capture_last_token, overwrite_heads
from dpmtv.models.generic import GenericAdapter


class ModelOnlyContract:
    family: str

    @pytest.fixture(scope="class")
    @classmethod
    def adapter(cls, tiny_checkpoint):
        from transformers import AutoModelForImageTextToText

        path = tiny_checkpoint(cls.family)
        model = AutoModelForImageTextToText.from_pretrained(path).eval()
        return GenericAdapter(model, processor=None)

    @pytest.fixture(scope="class")
    @classmethod
    def input_ids(cls, adapter):
        generator = torch.Generator().manual_seed(0)
        return torch.randint(
            10, adapter.model.config.get_text_config().vocab_size, (2, 12), generator=generator
        )

    def _forward(self, adapter, input_ids):
        return adapter.model(input_ids=input_ids)

    def _logits(self, adapter, input_ids):
        with torch.no_grad():
            return self._forward(adapter, input_ids).logits[:, -1]

    def _capture(self, adapter, input_ids):
        layers = list(range(adapter.geometry.num_layers))
        with torch.no_grad(), capture_last_token(adapter, layers) as capture:
            self._forward(adapter, input_ids)
        return capture.activations

    def test_sites_resolve_with_heads_times_head_dim_input_width(self, adapter):
        geometry = adapter.geometry
        assert adapter.family == self.family and len(adapter.o_projs) == geometry.num_layers
        assert all(o.in_features == geometry.num_heads * geometry.head_dim for o in adapter.o_projs)

    def test_capture_is_deterministic(self, adapter, input_ids):
        first, second = self._capture(adapter, input_ids), self._capture(adapter, input_ids)
        for layer, value in first.items():
            assert value.shape == (2, adapter.geometry.num_heads, adapter.geometry.head_dim)
            assert torch.equal(value, second[layer])

    def test_self_overwrite_is_bitwise_no_op_and_two_heads_change_logits(self, adapter, input_ids):
        own, before = self._capture(adapter, input_ids[:1]), self._logits(adapter, input_ids[:1])
        all_heads = torch.arange(adapter.geometry.num_heads)
        with overwrite_heads(adapter, {layer: LayerPatch(all_heads, own[layer][0]) for layer in own}):
            assert torch.equal(self._logits(adapter, input_ids[:1]), before)
        values = torch.full((2, adapter.geometry.head_dim), 5.0)
        with overwrite_heads(adapter, {0: LayerPatch(torch.tensor([0, 1]), values)}):
            assert not torch.allclose(self._logits(adapter, input_ids[:1]), before)

    def test_no_hooks_survive_an_exception(self, adapter):
        patches = {0: LayerPatch(torch.tensor([0]), torch.zeros(1, adapter.geometry.head_dim))}
        with pytest.raises(RuntimeError, match="boom"):
            with capture_last_token(adapter, [0]), overwrite_heads(adapter, patches):
                raise RuntimeError("boom")
        assert not any(o._forward_pre_hooks for o in adapter.o_projs)
