"""The one time a build stores (ledger rows, the artifact's ``created_at`` and file time).

A time taken after a build has read private records tells how long the private computation
took, and that grows with the private N (add-remove-one, user level): ``written_at −
charged_at`` was 0.17 s at N = 20 and 1.57 s at N = 200. So a build takes its time ONCE, before
it reads any record, and stores that same value everywhere (docs/design.md §7, "What is stored").
Whole seconds: nothing finer is needed to order builds, and the value is the same string in the
ledger and the artifact.
"""

from __future__ import annotations

from datetime import datetime, timezone

__all__ = ["build_timestamp", "timestamp_seconds"]


def build_timestamp() -> str:
    """Now, UTC, ISO 8601 to the second: ``2026-12-01T22:09:43+00:00``."""
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def timestamp_seconds(timestamp: str) -> float:
    """A :func:`build_timestamp` string as seconds since the epoch (for file times)."""
    return datetime.fromisoformat(timestamp).timestamp()
