"""How each row of a batch picks its next token: greedy, or sampled with its own generator.

Generation itself runs greedy (``do_sample=False``) for the whole batch; this logits processor
edits each row's scores before the argmax. A greedy row without options is left alone (a batch
of such rows is exactly today's greedy batch). A row with ``logit_bias`` or penalties gets its
scores shifted; a sampled row (``temperature > 0``) draws its token from its own seeded
generator (after ``top_p``) and leaves only that token finite, so the argmax takes it. Rows of
one batch never share a random stream: the same seed gives the same answer whatever else runs
beside it.

Log-probabilities are read before any of these edits: they are the model's own distribution
under the vector (temperature 1), as vLLM reports them by default.
"""

from __future__ import annotations

import secrets
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from transformers import LogitsProcessor

MAX_TOP_LOGPROBS = 20  # OpenAI's limit


@dataclass(frozen=True)
class Decoding:
    """One row's decoding options (the defaults: greedy, no log-probabilities)."""

    temperature: float = 0.0
    top_p: float = 1.0
    seed: int | None = None  # None with temperature > 0: a fresh random seed
    logit_bias: tuple[tuple[int, float], ...] = ()  # (token id, added to its logit)
    frequency_penalty: float = 0.0
    presence_penalty: float = 0.0
    logprobs: bool = False
    top_logprobs: int = 0

    @property
    def sampled(self) -> bool:
        return self.temperature > 0

    @property
    def edits_scores(self) -> bool:
        return bool(self.sampled or self.logit_bias or self.frequency_penalty or self.presence_penalty)


GREEDY = Decoding()


class RowDecoding(LogitsProcessor):
    def __init__(self, decodings: Sequence[Decoding], prompt_length: int) -> None:
        self.decodings = list(decodings)
        self.prompt_length = prompt_length
        self.generators: list[torch.Generator | None] = [_generator(d) for d in self.decodings]
        # each row's log-probabilities at the latest step (None for rows that do not ask for them)
        self.latest: list[torch.Tensor | None] = [None for _ in self.decodings]
        self.any_edits = any(d.edits_scores for d in self.decodings)
        self.any_logprobs = any(d.logprobs for d in self.decodings)

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        if self.any_logprobs:
            logprobs = torch.log_softmax(scores.float(), dim=-1)
            self.latest = [logprobs[row] if d.logprobs else None for row, d in enumerate(self.decodings)]
        if not self.any_edits:
            return scores
        scores = scores.clone()
        for row, decoding in enumerate(self.decodings):
            if decoding.edits_scores:
                scores[row] = self._row(row, decoding, input_ids[row, self.prompt_length :], scores[row])
        return scores

    def _row(
        self, row: int, decoding: Decoding, generated: torch.Tensor, scores: torch.Tensor
    ) -> torch.Tensor:
        if decoding.logit_bias:
            ids = torch.tensor([t for t, _ in decoding.logit_bias], device=scores.device)
            bias = torch.tensor([b for _, b in decoding.logit_bias], device=scores.device, dtype=scores.dtype)
            scores = scores.index_add(0, ids, bias)
        if (decoding.frequency_penalty or decoding.presence_penalty) and generated.numel():
            counts = torch.bincount(generated, minlength=scores.shape[0])[: scores.shape[0]].to(scores.dtype)
            scores = scores - counts * decoding.frequency_penalty - (counts > 0) * decoding.presence_penalty
        if not decoding.sampled:
            return scores
        token = _sample(scores, decoding, self.generators[row])
        return _only(scores, token)


def _only(scores: torch.Tensor, token: int) -> torch.Tensor:
    kept = torch.full_like(scores, float("-inf"))
    kept[token] = 0.0
    return kept


def _sample(scores: torch.Tensor, decoding: Decoding, generator: torch.Generator | None) -> int:
    """One draw from softmax(scores / temperature) cut to the smallest top set holding ``top_p``
    of the mass; the draw is an inverse-CDF lookup of one uniform from the row's generator."""
    probs = torch.softmax(scores.double().cpu() / decoding.temperature, dim=-1)
    ordered, order = torch.sort(probs, descending=True)
    cumulative = torch.cumsum(ordered, dim=-1)
    keep = (cumulative - ordered) < decoding.top_p
    keep[0] = True
    ordered = torch.where(keep, ordered, torch.zeros_like(ordered))
    cumulative = torch.cumsum(ordered, dim=-1)
    uniform = torch.rand(1, generator=generator, dtype=torch.float64) * cumulative[-1]
    index = int(torch.searchsorted(cumulative, uniform).clamp(max=len(ordered) - 1))
    return int(order[index])


def _generator(decoding: Decoding) -> torch.Generator | None:
    if not decoding.sampled:
        return None
    seed = decoding.seed if decoding.seed is not None else secrets.randbits(63)
    return torch.Generator().manual_seed(seed % (2**64))
