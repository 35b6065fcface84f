"""Distributed extraction: a build's clipped chunk vectors summed, the sensitivity audit's chunk
vectors and private selection's chunk votes computed on Ray workers.

Workers return their batch's result (a sum, vectors, votes) and the chunk ids they covered; the
driver checks the ids, combines the results, and adds noise once (``docs/design.md``,
"Distributed builds").
:class:`RayExecutor` needs the ``ray`` extra (``pip install -e '.[ray]'`` in the source
checkout); it is imported on first use, so this package does not import Ray. The local executor
and the chunk-task protocol are :mod:`dpmtv.forward.executor`.
"""

from __future__ import annotations

from typing import Any

from dpmtv.distributed.batches import BatchResult, ChunkBatch, check_coverage, split_batches

__all__ = [
    "BatchResult",
    "ChunkBatch",
    "RayExecutor",
    "check_coverage",
    "split_batches",
]


def __getattr__(name: str) -> Any:
    if name == "RayExecutor":
        from dpmtv.distributed.ray_executor import RayExecutor

        return RayExecutor
    raise AttributeError(f"module 'dpmtv.distributed' has no attribute '{name}'")
