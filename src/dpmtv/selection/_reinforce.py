"""MTV's REINFORCE head search (Huang et al., 2024), batched and seeded."""

from __future__ import annotations

import time
from typing import Any

import torch

from dpmtv._progress import progress_bar
from dpmtv.errors import ParameterError
from dpmtv.selection._search import PublicSearch, heads_of
from dpmtv.selection.result import SelectionResult

#: MTV clamps each head's keep-probability to [1e-3, 1 − 1e-3] before sampling, so no head is
#: ever certainly in or out and the log-probabilities stay finite (its gradient is zero outside).
PROBABILITY_CLAMP = 1e-3


def keep_probabilities(logits: torch.Tensor) -> torch.Tensor:
    """``clamp(sigmoid(θ), 1e-3, 1 − 1e-3)``, as MTV computes its Bernoulli probabilities."""
    return torch.sigmoid(logits).clamp(PROBABILITY_CLAMP, 1 - PROBABILITY_CLAMP)


def reinforce(
    search: PublicSearch,
    *,
    steps: int = 600,
    samples_per_step: int = 32,
    lr: float = 0.1,
    init_logit: float = -1.0,
    final_samples: int = 10,
    seed: int = 0,
    progress: bool = True,
) -> SelectionResult:
    """Learn a keep-probability ``p_lh = clamp(sigmoid(θ_lh), 1e-3, 1 − 1e-3)`` per head (the clamp
    as in MTV) by policy gradient.

    Each step takes the next train query (seeded shuffle, cycled), samples ``samples_per_step``
    subsets ``x ~ Bernoulli(p)`` restricted to the pool, patches the public means into
    each subset (one batch, one row per subset), and uses the reward ``r = log p(first answer
    token)`` (= −cross-entropy). With z-scored rewards ``z``, the REINFORCE loss
    ``−mean_s z_s · log P_θ(x_s)`` (``log P = x log p + (1 − x) log(1 − p)``, differentiated
    through the clamp) has gradient ``−mean_s z_s (x_s − p)`` where the clamp is inactive and 0
    where it is; Adam (``lr``) steps on it. Finally ``final_samples`` subsets are drawn and the
    one with the lowest mean loss on the held-out dev queries is kept (empty draws are skipped).
    """
    if steps < 0 or samples_per_step < 2 or final_samples < 1:
        raise ParameterError(
            f"need steps >= 0, samples_per_step >= 2, final_samples >= 1; got {steps}, "
            f"{samples_per_step}, {final_samples}"
        )
    started = time.perf_counter()
    generator = torch.Generator().manual_seed(seed)
    pool = search.pool.float()  # (L, H)
    logits = torch.full(pool.shape, float(init_logit), requires_grad=True)  # (L, H)
    optimizer = torch.optim.Adam([logits], lr=lr)
    order = torch.randperm(search.train.num_queries, generator=generator).tolist()
    with progress_bar("REINFORCE head search", steps, enabled=progress) as advance:
        for step in range(steps):
            _policy_step(
                search, logits, pool, optimizer, order[step % len(order)], samples_per_step, generator
            )
            advance(1)
    probabilities = keep_probabilities(logits.detach()) * pool  # (L, H)
    details = dict(
        steps=steps,
        samples_per_step=samples_per_step,
        lr=lr,
        init_logit=init_logit,
        final_samples=final_samples,
        seed=seed,
    )
    return _final_choice(search, probabilities, final_samples, generator, started, details)


def _policy_step(
    search: PublicSearch,
    logits: torch.Tensor,
    pool: torch.Tensor,
    optimizer: torch.optim.Optimizer,
    query: int,
    rows: int,
    generator: torch.Generator,
) -> None:
    keep = keep_probabilities(logits)  # (L, H), differentiable
    samples = (
        torch.bernoulli(keep.detach().expand(rows, *logits.shape), generator=generator) * pool
    )  # (R, L, H)
    reward = search.train.evaluate(samples, [query])[0][:, 0].double()  # (R,)
    z = ((reward - reward.mean()) / (reward.std() + 1e-8)).float()  # (R,)
    log_prob = samples * torch.log(keep) + (1 - samples) * torch.log1p(-keep)  # (R, L, H)
    loss = -(z * (log_prob * pool).sum(dim=(1, 2))).mean()
    optimizer.zero_grad()
    loss.backward()  # type: ignore[no-untyped-call]  # torch leaves Tensor.backward unannotated
    optimizer.step()


def _final_choice(
    search: PublicSearch,
    probabilities: torch.Tensor,
    count: int,
    generator: torch.Generator,
    started: float,
    details: dict[str, Any],
) -> SelectionResult:
    draws = torch.bernoulli(probabilities.expand(count, *probabilities.shape), generator=generator)
    draws = draws[draws.flatten(1).sum(dim=1) > 0]  # (R', L, H) non-empty draws
    if draws.shape[0] == 0:  # every draw empty: keep the most probable head
        draws = (probabilities == probabilities.max()).float()[None]
    keys = search.dev_key(draws)  # (R',) mean dev log-prob
    best = int(keys.argmax())
    return SelectionResult(
        heads=heads_of(draws[best].bool()),
        method="reinforce",
        dev_metric=float(keys[best]),
        probabilities=probabilities.tolist(),
        candidates={f"sample-{i}": float(v) for i, v in enumerate(keys)},
        chosen=f"sample-{best}",
        seconds=time.perf_counter() - started,
        details={**details, "final_draws": [heads_of(d.bool()).to_json() for d in draws]},
    )
