"""Images resized once, as the image processor's own first step would (issue 25.1): the processor's
outputs are bitwise those of the full-size images, and only plain RGB images of fixed-size PIL
processors are touched (dpmtv.models.processors.presized_images)."""

from __future__ import annotations

import numpy as np
import pytest
from PIL import Image

from dpmtv.data.prompts import Example, Prompt
from dpmtv.models.processors import presized_images
from tests.conftest import TEST_DEVICE


@pytest.fixture(scope="module")
def embedded():
    from dpmtv.models.loading import load_model

    return load_model("embedded", device=TEST_DEVICE)


def _images() -> list[Image.Image]:
    rng = np.random.default_rng(3)

    def noise(height: int, width: int, mode: str = "RGB") -> Image.Image:
        channels = len(mode)
        pixels = rng.integers(0, 256, (height, width, channels), dtype=np.uint8)
        return Image.fromarray(pixels.squeeze(-1) if channels == 1 else pixels, mode=mode)

    keyed = noise(40, 30)
    keyed.info["transparency"] = (0, 0, 0)  # an RGB PNG's tRNS colour key: the processor composites it
    return [noise(384, 384), noise(300, 517), noise(24, 24), noise(7, 11), noise(64, 64, "RGBA"), keyed]


def test_the_processor_gives_bitwise_the_full_size_outputs(embedded):
    processor, images = embedded.adapter.processor, _images()
    presized = presized_images(processor, [images])[0]
    assert [image.size for image in presized[:4]] == [(24, 24)] * 4  # resized now (the test can fail)
    assert presized[4] is images[4] and presized[5] is images[5]  # alpha, colour key: left to the processor
    full = processor.image_processor(images, return_tensors="pt")["pixel_values"]
    once = processor.image_processor(presized, return_tensors="pt")["pixel_values"]
    assert full.dtype == once.dtype and full.shape == once.shape
    assert bool((full == once).all())


def test_encoding_a_prompt_is_bitwise_the_processor_on_full_size_images(embedded):
    adapter, images = embedded.adapter, _images()[:3]
    prompt = Prompt(
        (Example((images[0],), "q", "a"), Example((images[1],), "q", "b")), Example((images[2],), "q")
    )
    encoded = adapter.encode([prompt])
    reference = adapter.processor(
        text=[adapter.render_text(prompt)], images=[prompt.all_images()], return_tensors="pt", padding=True
    )
    assert encoded.keys() == reference.keys()
    for key in encoded:
        assert encoded[key].dtype == reference[key].dtype and bool((encoded[key] == reference[key]).all()), (
            key
        )


def test_processors_that_size_images_by_their_content_are_left_alone():
    from transformers import CLIPImageProcessor

    images = _images()[:2]
    shortest_edge = CLIPImageProcessor(size={"shortest_edge": 16}, crop_size={"height": 16, "width": 16})
    assert presized_images(type("P", (), {"image_processor": shortest_edge})(), images) is images
    assert presized_images(object(), images) is images  # no image processor at all
