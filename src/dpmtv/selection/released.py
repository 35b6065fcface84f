r"""The candidate choice AFTER the release (``--selection-utility released-probability``,
docs/design.md §3): release the whole public pool once, then choose among the public candidate head
sets by how well the RELEASED vector answers the private records themselves.

Why. The chunk utilities of :mod:`dpmtv.selection.candidates` score a candidate by patching each
chunk's OWN one-chunk mean into it, ``m`` utilities in all: a weak, indirect signal of what the
``m``-chunk mean will do, which the exponential mechanism at a small ε cannot separate among ~100
candidates (dev, ε = 1, N = 2048, s = 8: noisy choice 0.649, exact argmax 0.730, public 0.787).
Here every candidate is scored with the vector that will actually be used, on all ``N`` records:
``s`` times the terms at the same sensitivity.

Mechanism.

1. The Gaussian release of the whole pool ``P`` (per-layer clip norms over every pool layer, as a
   candidate choice's Δ rests on anyway): ``v``, ``(ε_r, δ)``-DP.
2. For every private record ``r`` and public candidate ``S ⊆ P``: ``u_r(S)`` = the probability of
   ``r``'s first answer token on ``r``'s zero-shot question with ``v`` patched into ``S``'s heads
   (:func:`record_utilities`), in ``[0, 1]``. Totals ``U(S) = Σ_r u_r(S)``; one exponential-mechanism
   choice (:func:`dpmtv.privacy.noisy_top_k.noisy_top_k`, ``k = 1``, Gumbel scale ``2/ε_sel``, or
   ``1/ε_sel`` under add-remove-one, where the totals are monotone).
3. The artifact is ``v`` on the chosen heads: post-processing of (1) and (2).

Sensitivity. Given ``v``, ``u_r`` is a function of record ``r`` alone (and of ``v``, the public model
and the candidates). Replace-one changes one record, hence one term of every total: ``L∞ = 1``.
Add-remove-one adds or removes one term in ``[0, 1]``: the same bound, and every total moves the
same way, so the exponential mechanism needs no factor 2 (``P ∝ exp(ε_sel·U)``, the derivation in
:mod:`dpmtv.privacy.noisy_top_k`, "Monotone scores"); replace-one keeps ``exp(ε_sel·U/2)``. A
user's ``k`` records would move it by ``k``: user level is refused
(:class:`dpmtv.pipeline.settings.BuildSettings`). A record whose scoring fails contributes 0 to
every total (a constant: the bound holds).

Privacy. The choice is ``ε_sel``-DP for every fixed ``v``, and ``v`` is the Gaussian release: their
adaptive composition is what the build accounts, the choice as ``DiscreteLaplaceDpEvent(ε_sel, 1)``
composed with the Gaussian by dp-accounting's PLD accountant, exactly the event of a candidate choice
before the release (:mod:`dpmtv.privacy.noisy_top_k`). The order in time does not change the event.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

import numpy as np
import torch

from dpmtv._progress import progress_bar
from dpmtv.data.records import Record
from dpmtv.errors import ParameterError
from dpmtv.heads import HeadSet
from dpmtv.models.base import ModelAdapter
from dpmtv.models.loading import LoadedModel
from dpmtv.privacy.noisy_top_k import PrivateSelectionPlan, noisy_top_k
from dpmtv.selection._patching import MaskScorer
from dpmtv.selection._search import mask_of
from dpmtv.selection.candidates import RELEASED_UTILITIES, candidate_choice
from dpmtv.selection.private import _held_out_query
from dpmtv.selection.result import SelectionResult

__all__ = ["RELEASED_UTILITIES", "record_utilities", "select_on_release"]


def pool_values(rows: np.ndarray, pool: HeadSet, adapter: ModelAdapter) -> torch.Tensor:
    """The released pool rows ``(K, d)`` (pool order) as ``(L, H, d)`` over the whole model, zero
    outside the pool (no candidate patches a head outside it)."""
    geometry = adapter.geometry
    values = torch.zeros(geometry.num_layers, geometry.num_heads, geometry.head_dim)
    for (layer, head), row in zip(pool.pairs, rows, strict=True):
        values[layer, head] = torch.from_numpy(np.asarray(row, dtype=np.float32))
    return values


def record_utilities(
    adapter: ModelAdapter,
    records: Sequence[Record],
    values: torch.Tensor,
    candidates: Sequence[HeadSet],
    *,
    progress: bool = False,
) -> np.ndarray:
    """``(N, n)`` float64 in ``[0, 1]``: per record, the probability of its first answer token on
    its zero-shot question with ``values`` ``(L, H, d)`` patched into each candidate's heads (the
    head search's cached one-token scorer, :class:`~dpmtv.selection._patching.MaskScorer`), one
    scorer per record so that nothing of another record (not even whether its KV cache reproduced
    the full forward) reaches its row. A record whose scoring fails gets a row of zeros."""
    masks = torch.stack([mask_of(c, adapter.geometry) for c in candidates]).float()  # (n, L, H)
    out = np.zeros((len(records), len(candidates)))
    with progress_bar("candidates on the release", len(records), enabled=progress) as advance:
        for index, record in enumerate(records):
            out[index] = _probabilities(adapter, record, values, masks)
            advance(1)
    return out


def _probabilities(
    adapter: ModelAdapter, record: Record, values: torch.Tensor, masks: torch.Tensor
) -> np.ndarray:
    """``(n,)``: one record's utilities; zeros when it cannot be scored (a constant: the bound holds)."""
    try:
        scorer = MaskScorer(adapter, values, [_held_out_query(adapter, record)], row_batch=masks.shape[0])
        log_probs, _ = scorer.evaluate(masks)  # (n, 1)
    except Exception:  # noqa: BLE001 (any failure of one record gives the constant 0, as a failed chunk)
        return np.zeros(masks.shape[0])
    probabilities = log_probs[:, 0].double().exp().numpy()
    if not np.all(np.isfinite(probabilities)):
        return np.zeros_like(probabilities)
    return np.asarray(np.clip(probabilities, 0.0, 1.0))


def select_on_release(
    loaded: LoadedModel,
    records: Sequence[Record],
    pool: HeadSet,
    rows: np.ndarray,
    *,
    candidates: Sequence[HeadSet],
    candidate_list: str,
    utility: str,
    plan: PrivateSelectionPlan,
    rng: np.random.Generator | None = None,
    progress: bool = False,
) -> SelectionResult:
    """Score every candidate on every record with the released pool ``rows`` ``(K, d)`` → totals →
    one ``ε_sel``-DP exponential-mechanism choice (module docstring). ``plan`` is the ``k = 1``
    plan; ``rng``: seeded numpy Gumbel noise, INSECURE, for tests and experiments only."""
    if utility not in RELEASED_UTILITIES:
        raise ParameterError(f"a choice on the release needs one of {RELEASED_UTILITIES}, got {utility!r}")
    if plan.k != 1 or plan.max_votes_per_chunk != 1:
        raise ParameterError("the candidate choice is one round of sensitivity 1: its plan needs k = k' = 1")
    started = time.perf_counter()
    values = pool_values(rows, pool, loaded.adapter)
    totals = record_utilities(loaded.adapter, records, values, candidates, progress=progress).sum(axis=0)
    (picked,) = noisy_top_k(totals, k=1, epsilon=plan.epsilon_selection, rng=rng, monotone=plan.monotone)
    del totals  # private: only the noisy choice leaves
    return candidate_choice(
        candidates,
        picked,
        plan,
        started=started,
        seeded=rng is not None,
        candidate_list=candidate_list,
        pool=pool,
        utility=utility,
    )
