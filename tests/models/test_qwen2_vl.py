import numpy as np
import torch
from PIL import Image

from dpmtv.data.prompts import Example, Prompt
from tests.models.contract import AdapterContract


def _image(rng: np.random.Generator, height: int, width: int) -> Image.Image:
    return Image.fromarray(rng.integers(0, 256, (height, width, 3), dtype=np.uint8))


class MixedImageSizesChecks:
    """Extra check for families whose image token count depends on the image size: a batch of
    prompts with images of different sizes and aspect ratios equals the prompts one by one."""

    def test_mixed_image_sizes_batched_equals_one_by_one(self, loaded):
        rng = np.random.default_rng(1)
        prompts = [
            Prompt(
                (Example((_image(rng, 20, 20),), "What is it?", "a cat"),),
                Example((_image(rng, 32, 24),), "What is it?"),
            ),
            Prompt((), Example((_image(rng, 18, 30),), "And this one?")),
        ]
        layers = list(range(loaded.adapter.geometry.num_layers))
        batched_logits = self._last_logits(loaded, prompts)
        batched_heads = self._capture(loaded, prompts, layers)
        for row, prompt in enumerate(prompts):
            torch.testing.assert_close(
                batched_logits[row], self._last_logits(loaded, [prompt])[0], atol=1e-5, rtol=0
            )
            single_heads = self._capture(loaded, [prompt], layers)
            for layer in layers:
                torch.testing.assert_close(
                    batched_heads[layer][row], single_heads[layer][0], atol=1e-5, rtol=0
                )


class TestQwen2VLAdapter(MixedImageSizesChecks, AdapterContract):
    family = "qwen2_vl"
