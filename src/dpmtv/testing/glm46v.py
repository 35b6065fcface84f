"""Tiny random-weight GLM-4.6V: the GLM-4V vision tower and text model under GLM-4.6V's own
classes. Its stock processor requires a video processor; the checkpoint is saved without one, as
an image-only checkpoint, and loads through dpmtv's generic image-only processor route (no family
file)."""

from __future__ import annotations

from pathlib import Path

from transformers import Glm46VConfig, Glm46VForConditionalGeneration, Glm46VProcessor

from dpmtv.models.processors import image_only_class
from dpmtv.testing.glm4v import build_glm


def build(out_dir: Path, *, seed: int = 0) -> Path:
    return build_glm(
        out_dir,
        seed=seed,
        config_cls=Glm46VConfig,
        model_cls=Glm46VForConditionalGeneration,
        processor_cls=image_only_class(Glm46VProcessor),
        text_model_type="glm4v_text",
    )
