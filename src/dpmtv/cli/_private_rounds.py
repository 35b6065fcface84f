"""The private rounds' settings from their options, shared by ``dpmtv build`` and
``dpmtv audit --sensitivity``: each option is passed as parsed (``None`` where not given), and the
library fills the defaults (:mod:`dpmtv.pipeline.selection_defaults`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from dpmtv.errors import ParameterError

if TYPE_CHECKING:
    from dpmtv.models.loading import LoadedModel
    from dpmtv.pipeline.settings import PrivateClipSettings, PrivateSelectionSettings

__all__ = ["private_clip_settings", "private_selection_settings"]


def private_clip_settings(options: Mapping[str, Any]) -> PrivateClipSettings:
    """``--l2-clip-norm private``'s round, from the --clip-* options."""
    from dpmtv.pipeline.settings import PrivateClipSettings  # imported when needed: it pulls in numpy

    return PrivateClipSettings(
        epsilon_fraction=options["clip_epsilon_fraction"],
        quantile=options["clip_quantile"],
        utility=options["clip_utility"],
        tolerance=options["clip_tolerance"],
    )


def private_selection_settings(loaded: LoadedModel, options: Mapping[str, Any]) -> PrivateSelectionSettings:
    """``--heads-from private``'s selection, from the --select-*/--selection-* options."""
    from dpmtv.pipeline.settings import PrivateSelectionSettings

    if options["private_selection"] != "candidates":
        _check_select_k(options["select_k"], options["select_pool"], loaded)
    return PrivateSelectionSettings(
        k=options["select_k"],
        selection_fraction=options["selection_fraction"],
        composition=options["selection_composition"],
        pool=options["select_pool"],
        method=options["private_selection"],
        candidates=options["selection_candidates"],
        utility=options["selection_utility"],
    )


def _check_select_k(k: int, pool_spec: str, loaded: LoadedModel) -> None:
    """k heads are picked from the pool: 1 <= k <= its size (0 used to fail deep in Δ)."""
    from dpmtv.heads import parse_head_spec

    pool = len(parse_head_spec(pool_spec, loaded.adapter.geometry).pairs)
    if not 1 <= k <= pool:
        raise ParameterError(
            f"--select-k must be between 1 and {pool} (the heads in --select-pool {pool_spec!r}), got {k}"
        )
