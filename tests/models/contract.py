"""The adapter contract every supported family passes (subclass per family, set ``family``).

Runs on a tiny random-weight checkpoint of the real architecture, saved with save_pretrained and
reloaded through ``dpmtv.models.load_model``, so the real loading path is exercised.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from PIL import Image

from dpmtv.data.prompts import Example, Prompt
from dpmtv.forward.hooks import LayerPatch, PatchMode, capture_last_token, overwrite_heads
from dpmtv.models.loading import load_model
from dpmtv.models.registry import family_entry
from tests.conftest import TEST_DEVICE


def random_image(rng: np.random.Generator, size: int = 20) -> Image.Image:
    return Image.fromarray(rng.integers(0, 256, (size, size, 3), dtype=np.uint8))


def sample_prompts(rng: np.random.Generator) -> list[Prompt]:
    """Prompts of different lengths, so a batch needs left padding."""
    two_shot = Prompt(
        (
            Example((random_image(rng),), "What is it?", "a cat"),
            Example((random_image(rng),), "What is it?", "a dog"),
        ),
        Example((random_image(rng),), "What is it?"),
    )
    zero_shot = Prompt((), Example((random_image(rng),), "Which colour is the big shape here?"))
    return [two_shot, zero_shot]


class AdapterContract:
    family: str

    @pytest.fixture(scope="class")
    @classmethod
    def loaded(cls, tiny_checkpoint):
        return load_model(tiny_checkpoint(cls.family), device=TEST_DEVICE)

    @pytest.fixture(scope="class")
    @classmethod
    def prompts(cls):
        return sample_prompts(np.random.default_rng(0))

    def _last_logits(self, loaded, prompts) -> torch.Tensor:
        with torch.no_grad():
            return loaded.model(**loaded.adapter.encode(prompts)).logits[:, -1].float()

    def _capture(self, loaded, prompts, layers):
        with torch.no_grad(), capture_last_token(loaded.adapter, layers) as capture:
            loaded.model(**loaded.adapter.encode(prompts))
        return capture.activations

    def test_family_is_registered_for_its_model_type(self, loaded):
        assert loaded.adapter.family == loaded.model.config.model_type == self.family
        assert family_entry(self.family).status in ("generic", "special-cased")

    def test_sites_resolve_one_per_layer(self, loaded):
        adapter = loaded.adapter
        assert len(adapter.o_projs) == adapter.geometry.num_layers
        assert len({id(o) for o in adapter.o_projs}) == adapter.geometry.num_layers

    def test_heads_times_head_dim_is_o_proj_input_width(self, loaded):
        geometry = loaded.adapter.geometry
        for o_proj in loaded.adapter.o_projs:
            assert o_proj.in_features == geometry.num_heads * geometry.head_dim

    def test_capture_shape_and_determinism(self, loaded, prompts):
        layers = list(range(loaded.adapter.geometry.num_layers))
        first = self._capture(loaded, prompts, layers)
        second = self._capture(loaded, prompts, layers)
        geometry = loaded.adapter.geometry
        for layer in layers:
            assert first[layer].shape == (len(prompts), geometry.num_heads, geometry.head_dim)
            assert torch.equal(first[layer], second[layer])

    def test_overwriting_every_head_with_its_own_value_leaves_logits_bitwise_unchanged(self, loaded, prompts):
        prompt = prompts[:1]
        geometry = loaded.adapter.geometry
        layers = list(range(geometry.num_layers))
        own = self._capture(loaded, prompt, layers)
        before = self._last_logits(loaded, prompt)
        all_heads = torch.arange(geometry.num_heads)
        patches = {layer: LayerPatch(all_heads, own[layer][0]) for layer in layers}
        with overwrite_heads(loaded.adapter, patches):
            after = self._last_logits(loaded, prompt)
        assert torch.equal(before, after)

    def test_overwriting_two_heads_changes_logits(self, loaded, prompts):
        prompt = prompts[:1]
        geometry = loaded.adapter.geometry
        before = self._last_logits(loaded, prompt)
        values = torch.full((2, geometry.head_dim), 5.0)
        with overwrite_heads(loaded.adapter, {0: LayerPatch(torch.tensor([0, 1]), values)}):
            after = self._last_logits(loaded, prompt)
        assert not torch.allclose(before, after)

    def test_prefill_only_mode_patches_the_prompt(self, loaded, prompts):
        prompt = prompts[:1]
        geometry = loaded.adapter.geometry
        before = self._last_logits(loaded, prompt)
        values = torch.full((2, geometry.head_dim), 5.0)
        patches = {0: LayerPatch(torch.tensor([0, 1]), values)}
        with overwrite_heads(loaded.adapter, patches, mode=PatchMode.PREFILL_ONLY):
            after = self._last_logits(loaded, prompt)
        assert not torch.allclose(before, after)

    def test_batched_equals_one_by_one(self, loaded, prompts):
        layers = list(range(loaded.adapter.geometry.num_layers))
        batched_logits = self._last_logits(loaded, prompts)
        batched_heads = self._capture(loaded, prompts, layers)
        for row, prompt in enumerate(prompts):
            single_logits = self._last_logits(loaded, [prompt])
            torch.testing.assert_close(batched_logits[row], single_logits[0], atol=1e-5, rtol=0)
            single_heads = self._capture(loaded, [prompt], layers)
            for layer in layers:
                torch.testing.assert_close(
                    batched_heads[layer][row], single_heads[layer][0], atol=1e-5, rtol=0
                )

    def test_no_hooks_survive_an_exception(self, loaded, prompts):
        geometry = loaded.adapter.geometry
        patches = {0: LayerPatch(torch.tensor([0]), torch.zeros(1, geometry.head_dim))}
        with pytest.raises(RuntimeError, match="boom"):
            with capture_last_token(loaded.adapter, [0]), overwrite_heads(loaded.adapter, patches):
                raise RuntimeError("boom")
        for o_proj in loaded.adapter.o_projs:
            assert not o_proj._forward_pre_hooks
