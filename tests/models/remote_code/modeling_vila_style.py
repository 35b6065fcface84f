"""A tiny remote-code model in the style of VILA's ``LlavaLlamaModel``: a transformers
``LlamaForCausalLM`` at ``llm`` (so heads live at ``llm.model.layers[i].self_attn.o_proj``), a
``vision_tower`` and an ``mm_projector``; image features replace the ``<image>`` token embeddings
in order."""

from torch import nn
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedModel

from .configuration_vila_style import VilaStyleConfig


class VisionTowerStub(nn.Module):
    def __init__(self, vision):
        super().__init__()
        self.patch_embed = nn.Conv2d(3, vision["hidden_size"], vision["patch_size"], vision["patch_size"])

    def forward(self, images):  # (N, 3, S, S) -> (N, P, C)
        return self.patch_embed(images).flatten(2).transpose(1, 2)


class LlavaLlamaModel(PreTrainedModel):
    config_class = VilaStyleConfig

    def __init__(self, config):
        super().__init__(config)
        self.llm = LlamaForCausalLM(LlamaConfig(**config.llm_cfg))
        self.vision_tower = VisionTowerStub(config.vision)
        hidden = config.llm_cfg["hidden_size"]
        self.mm_projector = nn.Sequential(
            nn.Linear(config.vision["hidden_size"], hidden), nn.GELU(), nn.Linear(hidden, hidden)
        )
        self.post_init()

    def forward(self, input_ids, attention_mask=None, images=None, **kwargs):
        embeds = self.llm.get_input_embeddings()(input_ids)
        if images is not None:
            features = self.mm_projector(self.vision_tower(images)).reshape(-1, embeds.shape[-1])
            slots = (input_ids == self.config.image_token_id)[..., None]
            embeds = embeds.masked_scatter(slots, features.to(embeds.dtype))
        return self.llm(inputs_embeds=embeds, attention_mask=attention_mask)
