"""PaliGemma (``PaliGemmaForConditionalGeneration``): sites discovered; the prompt format is not.

PaliGemma checkpoints ship no chat template. The model was trained on all of a sample's images
first, then ``<bos>``, one prefix line and ``\\n`` (the processor writes the images, ``<bos>`` and
the newline when the text starts with the image tokens). dpmtv writes a many-shot prompt as that
prefix: demonstrations as ``question answer`` lines, then the query's question.
"""

from __future__ import annotations

from dpmtv.data.prompts import Prompt
from dpmtv.models.generic import GenericAdapter
from dpmtv.models.registry import register


@register
class PaliGemmaAdapter(GenericAdapter):
    display_name = "PaliGemma"
    model_types = ("paligemma",)
    special_reason = "no chat template: images first, then one prefix line (PaliGemma's trained format)"

    def render_text(self, prompt: Prompt) -> str:
        if getattr(self.processor, "chat_template", None):
            return super().render_text(prompt)
        images = self.processor.image_token * len(prompt.all_images())
        lines = [f"{demo.question} {demo.answer}" for demo in prompt.demonstrations]
        return images + "\n".join([*lines, prompt.query.question])

    def render_with_answer(self, prompt: Prompt, answer: str) -> str:
        if getattr(self.processor, "chat_template", None):
            return super().render_with_answer(prompt, answer)
        return f"{self.render_text(prompt)}\n{answer}"  # the processor ends the prefix with \n
