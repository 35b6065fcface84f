"""A tiny LLaVA whose answer token is carried by a PLANTED set of heads.

One residual coordinate ``r`` is made a private channel read only by the unembedding of the target
token: nothing writes ``r`` (embeddings, MLPs, projector, every o_proj row ``r`` zeroed) and no
layer reads it (its RMSNorm weights zeroed). Then each head's o_proj row ``r`` is set to
``s_h · α · δ_h / ‖δ_h‖²``, where ``δ_h`` = (public many-shot mean − mean zero-shot output) of
head ``h``. Patching the public mean into head ``h`` therefore moves ``x_r`` by about ``s_h·α``,
and the target logit by ``β·x_r/rms``: planted heads (``s = +1``) raise it, all others
(``s = −0.5``) lower it. The best subset is exactly the planted set; a search that ignores the
reward, or follows it the wrong way, returns something else.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import torch
from PIL import Image

from dpmtv.forward.hooks import capture_last_token
from dpmtv.selection._data import PublicTask, prepare_public_task

PLANTED = ((0, 1), (1, 2), (1, 3))
ANSWER = "Z"  # a character absent from the prompt template and the question
ALPHA, BETA, DECOY = 0.01, 20.0, -0.5
SHOTS = 4


def write_public_records(folder: Path, count: int, *, seed: int = 0) -> Path:
    rng = np.random.default_rng(seed)
    folder.mkdir(parents=True, exist_ok=True)
    rows = []
    for index in range(count):
        Image.fromarray(rng.integers(0, 256, (20, 20, 3), dtype=np.uint8)).save(folder / f"{index}.png")
        rows.append({"image": f"{index}.png", "question": "What is shown?", "answer": ANSWER})
    path = folder / "public.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def plant(loaded, records) -> PublicTask:
    """Edit ``loaded`` in place (see module docstring); return the task prepared on the result."""
    model, text = loaded.model, loaded.model.model.language_model
    r = text.config.hidden_size - 1
    with torch.no_grad():
        _isolate_channel(model, text, r)
        task = prepare_public_task(loaded, records, shots=SHOTS)
        delta = task.means - _zero_shot_mean(loaded, task)  # (L, H, d)
        head_dim = loaded.adapter.geometry.head_dim
        for layer, block in enumerate(text.layers):
            for head in range(loaded.adapter.geometry.num_heads):
                sign = 1.0 if (layer, head) in PLANTED else DECOY
                row = sign * ALPHA * delta[layer, head] / delta[layer, head].norm() ** 2
                block.self_attn.o_proj.weight[r, head * head_dim : (head + 1) * head_dim] = row
        model.lm_head.weight[task.train[0].target, r] = BETA
    return prepare_public_task(loaded, records, shots=SHOTS)


def _isolate_channel(model, text, r: int) -> None:
    text.embed_tokens.weight[:, r] = 0
    for block in text.layers:
        block.input_layernorm.weight[r] = 0
        block.post_attention_layernorm.weight[r] = 0
        block.mlp.down_proj.weight[r, :] = 0
        block.self_attn.o_proj.weight[r, :] = 0
    projector = model.model.multi_modal_projector
    projector.linear_2.weight[r, :] = 0
    projector.linear_2.bias[r] = 0
    model.lm_head.weight[:, r] = 0


def _zero_shot_mean(loaded, task: PublicTask) -> torch.Tensor:
    layers = list(range(loaded.adapter.geometry.num_layers))
    with capture_last_token(loaded.adapter, layers) as capture:
        loaded.model(**loaded.adapter.encode([query.prompt for query in task.train]))
    return torch.stack([capture.activations[layer].mean(dim=0) for layer in layers])  # (L, H, d)
