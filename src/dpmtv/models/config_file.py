"""The head geometry read from a checkpoint's ``config.json`` as plain JSON, without transformers.

``dpmtv plan`` needs only the decoder's geometry, and importing transformers (and with it torch)
costs seconds before the first line of output. A ``config.json`` that states the text decoder's
``num_hidden_layers``, ``num_attention_heads`` and ``head_dim`` (or ``hidden_size``) as integers
— in its ``text_config`` when it has one, else at the top level — gives the geometry directly;
this is the rule of :meth:`dpmtv.models.base.ModelAdapter.head_geometry` applied to the saved
values. Anything else (a hub id, an encoder–decoder, a refused family, values left to a config
class's defaults or attribute maps) goes through :func:`dpmtv.models.loading.read_head_geometry`,
which builds the transformers config. ``tests/models/test_config_file.py`` checks both routes
agree on every tiny family.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from dpmtv.models.base import HeadGeometry
from dpmtv.models.embedded import resolve_model_path

__all__ = ["read_head_geometry_fast"]


def read_head_geometry_fast(name_or_path: str | Path) -> HeadGeometry:
    """The decoder's head geometry, from ``config.json`` alone where it states it (see module)."""
    path = Path(resolve_model_path(name_or_path))
    geometry = _geometry_from_json(_read_config(path / "config.json"))
    if geometry is not None:
        return geometry
    from dpmtv.models.loading import read_head_geometry

    return read_head_geometry(path if path.exists() else name_or_path)


def _read_config(config_path: Path) -> dict[str, Any] | None:
    try:
        config = json.loads(config_path.read_text(encoding="utf-8"))
    except (OSError, ValueError):  # missing or unreadable: the full route reports it
        return None
    return config if isinstance(config, dict) else None


def _geometry_from_json(config: dict[str, Any] | None) -> HeadGeometry | None:
    from dpmtv.models.registry import REFUSED

    if config is None or config.get("is_encoder_decoder") or config.get("model_type") in REFUSED:
        return None
    text = config.get("text_config", config)
    if not isinstance(text, dict):
        return None
    layers, heads = text.get("num_hidden_layers"), text.get("num_attention_heads")
    head_dim, hidden = text.get("head_dim"), text.get("hidden_size")
    if not (_positive_int(layers) and _positive_int(heads)):
        return None
    if _positive_int(head_dim):
        return HeadGeometry(layers, heads, head_dim)
    if _positive_int(hidden):
        return HeadGeometry(layers, heads, hidden // heads)
    return None


def _positive_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0
