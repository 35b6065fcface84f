"""A tiny remote-code model in the style of the original Qwen-VL: ``transformer.h[i]`` blocks whose
attention has a fused ``c_attn`` (q, k, v in one linear) and an output projection ``c_proj``, a
``transformer.visual`` tower, and image features written over the ``<imgpad>`` tokens between
``<img>`` and ``</img>`` (Qwen-VL fills a fixed 256 such positions per image)."""

import torch
import torch.nn.functional as F
from torch import nn
from transformers import PreTrainedModel
from transformers.modeling_outputs import CausalLMOutputWithPast

from .configuration_qwen_style import QWenStyleConfig


class QWenAttention(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.num_heads, self.head_dim = config.num_attention_heads, config.kv_channels
        self.projection_size = self.num_heads * self.head_dim
        self.c_attn = nn.Linear(config.hidden_size, 3 * self.projection_size)
        self.c_proj = nn.Linear(self.projection_size, config.hidden_size, bias=False)

    def forward(self, hidden, allowed):  # hidden (B, T, D); allowed (B, 1, T, T) bool
        batch, length, _ = hidden.shape
        query, key, value = self.c_attn(hidden).split(self.projection_size, dim=-1)
        heads = [
            t.view(batch, length, self.num_heads, self.head_dim).transpose(1, 2) for t in (query, key, value)
        ]
        out = F.scaled_dot_product_attention(*heads, attn_mask=allowed)  # (B, H, T, d)
        return self.c_proj(out.transpose(1, 2).reshape(batch, length, self.projection_size))


class QWenMLP(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.w1 = nn.Linear(config.hidden_size, config.intermediate_size, bias=False)
        self.w2 = nn.Linear(config.hidden_size, config.intermediate_size, bias=False)
        self.c_proj = nn.Linear(config.intermediate_size, config.hidden_size, bias=False)

    def forward(self, hidden):
        return self.c_proj(self.w1(hidden) * F.silu(self.w2(hidden)))


class QWenBlock(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.ln_1 = nn.LayerNorm(config.hidden_size)
        self.attn = QWenAttention(config)
        self.ln_2 = nn.LayerNorm(config.hidden_size)
        self.mlp = QWenMLP(config)

    def forward(self, hidden, allowed):
        hidden = hidden + self.attn(self.ln_1(hidden), allowed)
        return hidden + self.mlp(self.ln_2(hidden))


class VisionTransformerStub(nn.Module):
    """Patch embedding + one linear: (N, 3, S, S) -> (N, (S/p)^2, D)."""

    def __init__(self, config):
        super().__init__()
        patch = config.visual["patch_size"]
        self.conv1 = nn.Conv2d(3, config.hidden_size, kernel_size=patch, stride=patch)
        self.proj = nn.Linear(config.hidden_size, config.hidden_size)

    def forward(self, images):
        return self.proj(self.conv1(images).flatten(2).transpose(1, 2))


class QWenModel(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.wte = nn.Embedding(config.vocab_size, config.hidden_size)
        self.wpe = nn.Embedding(config.max_position_embeddings, config.hidden_size)
        self.h = nn.ModuleList(QWenBlock(config) for _ in range(config.num_hidden_layers))
        self.ln_f = nn.LayerNorm(config.hidden_size)
        self.visual = VisionTransformerStub(config)


class QWenStyleLMHeadModel(PreTrainedModel):
    config_class = QWenStyleConfig
    base_model_prefix = "transformer"

    def __init__(self, config):
        super().__init__(config)
        self.transformer = QWenModel(config)
        self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)
        self.post_init()

    def forward(self, input_ids, attention_mask=None, images=None, **kwargs):
        mask = torch.ones_like(input_ids) if attention_mask is None else attention_mask
        hidden = self.transformer.wte(input_ids)
        if images is not None:
            features = self.transformer.visual(images).reshape(-1, hidden.shape[-1])
            hidden = hidden.masked_scatter((input_ids == self.config.image_pad_id)[..., None], features)
        positions = (mask.cumsum(-1) - 1).clamp(min=0)
        hidden = hidden + self.transformer.wpe(positions)
        length = input_ids.shape[1]
        causal = torch.ones(length, length, dtype=torch.bool, device=input_ids.device).tril()
        # Real tokens see earlier real tokens; every position sees itself (no empty rows).
        allowed = (causal & mask.bool()[:, None, None, :]) | torch.eye(
            length, dtype=torch.bool, device=input_ids.device
        )
        for block in self.transformer.h:
            hidden = block(hidden, allowed)
        return CausalLMOutputWithPast(logits=self.lm_head(self.transformer.ln_f(hidden)))
