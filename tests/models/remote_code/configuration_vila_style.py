"""Config of a tiny remote-code model in the style of VILA's ``LlavaLlamaModel``: the language
model's own config sits under ``llm_cfg``."""

from transformers import PretrainedConfig


class VilaStyleConfig(PretrainedConfig):
    model_type = "vila_style"

    def __init__(self, llm_cfg=None, vision=None, image_token_id=0, **kwargs):
        self.llm_cfg = llm_cfg or {}
        self.vision = vision or {"image_size": 16, "patch_size": 8, "hidden_size": 16}
        self.image_token_id = image_token_id
        super().__init__(**kwargs)
