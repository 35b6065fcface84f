"""Tiny random-weight GLM-4.5V (``glm4v_moe``): the GLM-4V vision tower and a mixture-of-experts
GLM text model (4 routed experts, 2 per token, one shared; the first layer dense). Saved without
a video processor; loads through the generic image-only processor route."""

from __future__ import annotations

from pathlib import Path

from transformers import Glm4vMoeConfig, Glm4vMoeForConditionalGeneration, Glm4vProcessor

from dpmtv.models.processors import image_only_class
from dpmtv.testing._common import HIDDEN
from dpmtv.testing.glm4v import build_glm


def build(out_dir: Path, *, seed: int = 0) -> Path:
    return build_glm(
        out_dir,
        seed=seed,
        config_cls=Glm4vMoeConfig,
        model_cls=Glm4vMoeForConditionalGeneration,
        processor_cls=image_only_class(Glm4vProcessor),
        text_model_type="glm4v_moe_text",
        n_routed_experts=4,
        n_shared_experts=1,
        num_experts_per_tok=2,
        moe_intermediate_size=HIDDEN,
        first_k_dense_replace=1,
        n_group=1,
        topk_group=1,
    )
