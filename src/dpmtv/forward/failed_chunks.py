r"""The failed-chunk rule: a chunk whose private computation fails contributes the zero vector and
casts no vote (model plumbing, no privacy maths; docs/design.md §10).

Everything one record can fail on by itself is refused before the charge
(:mod:`dpmtv.pipeline.validation`). What is left can only fail while a chunk is computed: NaN or
inf head outputs, a processor or model error on the chunk's whole many-shot prompt, an image file
that changed after validation. If such a failure aborted the build, one record would decide
whether an artifact appears (and after the charge, the error would quote it). Instead the rule is
part of the mechanism, public and recorded in the artifact (``prompt.failed_chunk_rule``):

    f(chunk_j) = clip(a(chunk_j))   if computing a(chunk_j) raises nothing and is finite,
                 0                  otherwise;
    vote(chunk_j) = the chunk's top-k' heads, or no vote, by the same test.

Why Δ is unchanged. Whether the computation of chunk ``j`` raises or gives a non-finite value is
decided by the same deterministic computation on chunk ``j``'s records (and the public model,
settings and budget) that gives ``a(chunk_j)``, so ``f(chunk_j)`` is still a function of chunk
``j`` alone: a neighbouring dataset changes at most one chunk's ``f``, as before. And both branches
lie in every clip ball, ``‖f(chunk_j)^(l)‖₂ <= C_l`` (``‖0‖ = 0``), which is all the derivation of
:func:`dpmtv.privacy.sensitivity.l2_sensitivity` uses about a chunk's vector (empty chunks
contribute 0 the same way). The vote histogram's bound needs each vote to be a set of at most
``k'`` distinct heads; the empty set is one. So neither sensitivity moves, and no charge, noise
or Δ changes. Caveat: a failure that is not a function of the chunk (the machine running out of
memory) falls under the rule too; it is then a function of the chunk and the machine's state,
which §1 leaves unprotected (side channels of the machine holding the data).

How many chunks failed is a count of private data (under every relation: it depends on the
records), so it is never stored nor printed, and no message after the charge says which record
or chunk failed.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, TypeVar

import numpy as np
import torch

__all__ = ["FAILED_CHUNK_RULE", "FAILED_CHUNK_RULE_HELP", "chunk_or_none", "finite_or_none"]

FAILED_CHUNK_RULE = "zero-vector-no-vote"
FAILED_CHUNK_RULE_HELP = (
    "a chunk whose private computation fails (an error, NaN or inf) contributes the zero vector and "
    "casts no vote"
)

T = TypeVar("T")
Values = TypeVar("Values", bound=Mapping[int, np.ndarray] | torch.Tensor)  # per-layer arrays or a tensor


def chunk_or_none(compute: Callable[..., T | None], *args: Any, **kwargs: Any) -> T | None:
    """``compute(*args, **kwargs)`` for one private chunk, or None when it raises (the rule above).

    Every ``Exception`` counts: the rule must hold whatever the chunk's records make the model
    stack raise. ``KeyboardInterrupt`` and ``SystemExit`` are not exceptions of the chunk and
    stop the build."""
    try:
        return compute(*args, **kwargs)
    except Exception:  # noqa: BLE001 (the rule covers every failure of one chunk's computation)
        return None


def finite_or_none(values: Values | None) -> Values | None:
    """``values`` (per-layer arrays or a tensor), or None when any entry is NaN or inf."""
    if values is None:
        return None
    if isinstance(values, torch.Tensor):
        return values if bool(torch.isfinite(values).all()) else None
    return values if all(np.isfinite(rows).all() for rows in values.values()) else None
