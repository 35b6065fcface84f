"""SmolVLM (``SmolVLMForConditionalGeneration``): o_proj at ``model.text_model.layers[i]``.

transformers' ``SmolVLMProcessor`` cannot be built here: it requires a video processor (which
needs torchvision) and num2words, and ``AutoProcessor`` on a SmolVLM folder either raises for the
video processor or returns only the tokenizer. For images, SmolVLM's prompt expansion is exactly
Idefics3's (``<fake_token_around_image>``, ``<row_r_col_c>`` / ``<global-img>``, then
``image_seq_len`` ``<image>`` tokens per tile), so the adapter loads an image-only
``Idefics3Processor`` around the checkpoint's own tokenizer, SmolVLM PIL image processor and chat
template.
"""

from __future__ import annotations

import json
from typing import Any

from dpmtv.data.prompts import Example, Prompt
from dpmtv.errors import AdapterError
from dpmtv.models.generic import GenericAdapter
from dpmtv.models.registry import register

# Token strings Idefics3Processor hard-codes; SmolVLMProcessor reads them from the tokenizer.
_IMAGE_TOKENS = {
    "image_token": "<image>",
    "fake_image_token": "<fake_token_around_image>",
    "global_image_token": "<global-img>",
}


@register
class SmolVLMAdapter(GenericAdapter):
    display_name = "SmolVLM"
    model_types = ("smolvlm",)
    special_reason = "image-only Idefics3Processor: the stock processor requires torchvision and num2words"
    # The processor sizes an image by its aspect ratio (tiles and padding follow it), so a private
    # fixed-shape pass first resizes every image to one public square (fixed_shape_prompt).
    fixed_shape_batches = True

    def fixed_shape_prompt(self, prompt: Prompt) -> Prompt:
        """Every image resized to the processor's ``longest_edge`` square: then each image gives the
        same tiles, the same pixel tensor and the same image tokens, whatever its own size (the
        processor upsamples to that edge anyway; only the aspect ratio is given up)."""
        edge = int(self.processor.image_processor.size["longest_edge"])

        def square(example: Example) -> Example:
            images = tuple(image.convert("RGB").resize((edge, edge)) for image in example.images)
            return Example(images, example.question, example.answer)

        return Prompt(tuple(square(demo) for demo in prompt.demonstrations), square(prompt.query))

    @classmethod
    def load_processor(cls, path: str) -> Any:
        """Image-only processor: tokenizer + ``SmolVLMImageProcessorPil`` + chat template."""
        from transformers import AutoTokenizer, Idefics3Processor, SmolVLMImageProcessorPil

        tokenizer = AutoTokenizer.from_pretrained(path)
        for attribute, expected in _IMAGE_TOKENS.items():
            actual = getattr(tokenizer, attribute, None) or expected
            if actual != expected:
                raise AdapterError(
                    f"SmolVLM at '{path}': the tokenizer's {attribute} is '{actual}', but dpmtv's "
                    f"image-only processor writes '{expected}'; this checkpoint is not supported"
                )
        return Idefics3Processor(
            image_processor=SmolVLMImageProcessorPil.from_pretrained(path),
            tokenizer=tokenizer,
            image_seq_len=_image_seq_len(path),
            chat_template=_chat_template(path, tokenizer),
        )


def _image_seq_len(path: str) -> int:
    """``<image>`` tokens per tile: the saved processor value, else from the model config."""
    saved = _json_file(path, "processor_config.json").get("image_seq_len")
    if saved is not None:
        return int(saved)
    from transformers import AutoConfig

    config = AutoConfig.from_pretrained(path)
    vision = config.vision_config
    return (vision.image_size // vision.patch_size) ** 2 // config.scale_factor**2


def _chat_template(path: str, tokenizer: Any) -> str | None:
    """The processor's chat template: ``chat_template.jinja`` (read by the tokenizer too) or the
    older ``chat_template.json``, else whatever the tokenizer config carries."""
    from transformers.utils import cached_file

    jinja = cached_file(path, "chat_template.jinja", _raise_exceptions_for_missing_entries=False)
    if jinja is not None:
        with open(jinja, encoding="utf-8") as handle:
            return handle.read()
    return _json_file(path, "chat_template.json").get("chat_template") or tokenizer.chat_template


def _json_file(path: str, filename: str) -> dict:
    from transformers.utils import cached_file

    resolved = cached_file(path, filename, _raise_exceptions_for_missing_entries=False)
    if resolved is None:
        return {}
    with open(resolved, encoding="utf-8") as handle:
        return json.load(handle)
