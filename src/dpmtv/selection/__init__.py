"""Head selection (docs/design.md §3): which heads a task vector overwrites.

* Public (auxiliary public data, no privacy cost): :func:`select_public`, or step by step with
  :class:`PublicSearch` and :func:`reinforce` / :func:`greedy` / :func:`scored` /
  :func:`best_of` (:mod:`dpmtv.selection.public`).
* Private (the private chunks vote; noisy top-k; composed accounting): :func:`select_private`
  with a :class:`~dpmtv.privacy.noisy_top_k.PrivateSelectionPlan` (:mod:`dpmtv.selection.private`).

Both return a :class:`SelectionResult`, saved as JSON with a ``heads`` key.
"""

from dpmtv.selection.private import chunk_votes, select_private
from dpmtv.selection.public import (
    METHODS,
    PublicSearch,
    best_of,
    greedy,
    layer_block_candidates,
    refine_with_best_of,
    reinforce,
    scored,
    select_public,
)
from dpmtv.selection.result import SelectionResult

__all__ = [
    "METHODS",
    "PublicSearch",
    "SelectionResult",
    "best_of",
    "chunk_votes",
    "greedy",
    "layer_block_candidates",
    "refine_with_best_of",
    "reinforce",
    "scored",
    "select_private",
    "select_public",
]
