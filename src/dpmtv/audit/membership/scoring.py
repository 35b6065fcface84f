"""Scoring: ``log p(answer | prompt)`` as generation would produce it (teacher forcing through the
KV cache, patched by the vector as while decoding)."""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import nullcontext

import numpy as np
import torch

from dpmtv._progress import progress_bar
from dpmtv.artifact.vector import TaskVector
from dpmtv.data.prompts import Prompt
from dpmtv.errors import ParameterError, RecordError
from dpmtv.forward._kv_cache import cache_argument, output_cache
from dpmtv.forward.hooks import PatchMode
from dpmtv.inference import apply
from dpmtv.models.base import ModelAdapter
from dpmtv.models.loading import LoadedModel


def answer_token_ids(adapter: ModelAdapter, prompt: Prompt, answer: str, *, where: str = "") -> list[int]:
    """The answer's tokens as the chat template puts them after the generation prompt (the
    difference between the conversation rendered with and without the answer), up to the first
    special token (the end of turn). Falls back to tokenising the answer alone when the template
    merges the prompt's last token with the answer."""
    tokenizer = adapter.tokenizer
    prefix = tokenizer(adapter.render_text(prompt), add_special_tokens=False)["input_ids"]
    rendered = adapter.render_with_answer(prompt, answer)
    full = tokenizer(rendered, add_special_tokens=False)["input_ids"]
    if full[: len(prefix)] == prefix:
        candidate = full[len(prefix) :]
    else:
        candidate = tokenizer(answer, add_special_tokens=False)["input_ids"]
    special = set(tokenizer.all_special_ids)
    tokens = []
    for token in candidate:
        if token in special:
            break
        tokens.append(int(token))
    if not tokens:
        raise RecordError(f"{where}: the answer {answer!r} has no tokens to score")
    return tokens


def answer_log_probs(
    loaded: LoadedModel,
    prompts: Sequence[Prompt],
    answers: Sequence[str],
    *,
    vector: TaskVector | None = None,
    mode: PatchMode | str | None = None,
    batch_size: int = 8,
    progress: bool = False,
    description: str = "scoring",
) -> tuple[np.ndarray, np.ndarray]:
    """Per prompt: ``log p(answer)`` summed over the answer's tokens (teacher forcing), and
    whether greedy decoding would produce exactly those tokens. With ``vector`` the model is
    patched through :func:`dpmtv.inference.apply` in ``mode`` (None: apply's default, the deployed
    behaviour): the prompt's last position at prefill, then (``every-call``) each fed answer
    token, exactly as while generating — the answer runs through the KV cache step by step."""
    if len(prompts) != len(answers):
        raise ParameterError(f"{len(prompts)} prompts but {len(answers)} answers")
    adapter = loaded.adapter
    targets = [
        answer_token_ids(adapter, p, a, where=f"query {i}") for i, (p, a) in enumerate(zip(prompts, answers))
    ]
    by_length: dict[int, list[int]] = {}
    for index, tokens in enumerate(targets):
        by_length.setdefault(len(tokens), []).append(index)  # one batch shape per answer length
    logps, hits = np.empty(len(prompts)), np.zeros(len(prompts), dtype=bool)
    if vector is None:
        patched = nullcontext()
    else:  # mode None: whatever apply() does by default, i.e. what a deployment does
        patched = apply(loaded, vector) if mode is None else apply(loaded, vector, mode=mode)
    with patched, torch.no_grad(), progress_bar(description, len(prompts), enabled=progress) as advance:
        for indices in by_length.values():
            for start in range(0, len(indices), batch_size):
                rows = indices[start : start + batch_size]
                tokens = torch.tensor([targets[i] for i in rows])  # (B, n)
                logp, hit = _teacher_forced(adapter, [prompts[i] for i in rows], tokens)
                logps[rows], hits[rows] = logp, hit
                advance(len(rows))
    return logps, hits


def _teacher_forced(adapter: ModelAdapter, prompts: list[Prompt], tokens: torch.Tensor):
    """Prefill the (left-padded) prompts, then feed answer tokens one by one with the cache."""
    model = adapter.model
    inputs = adapter.encode(prompts)
    device = inputs["input_ids"].device
    tokens = tokens.to(device)
    mask = inputs["attention_mask"]
    output = model(**inputs, use_cache=True)
    total = torch.zeros(tokens.shape[0], dtype=torch.float64, device=device)
    greedy = torch.ones(tokens.shape[0], dtype=torch.bool, device=device)
    for step in range(tokens.shape[1]):
        log_probs = torch.log_softmax(output.logits[:, -1].float(), dim=-1)  # (B, V)
        total += log_probs.gather(1, tokens[:, step : step + 1])[:, 0].double()
        greedy &= log_probs.argmax(dim=-1) == tokens[:, step]
        if step + 1 == tokens.shape[1]:
            break
        mask = torch.cat([mask, torch.ones_like(mask[:, :1])], dim=1)
        output = model(
            input_ids=tokens[:, step : step + 1],
            attention_mask=mask,
            **{cache_argument(model): output_cache(output)},
            use_cache=True,
        )
    return total.cpu().numpy(), greedy.cpu().numpy()
