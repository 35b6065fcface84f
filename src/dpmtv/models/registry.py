"""Adapters keyed by ``config.model_type``."""

from __future__ import annotations

from dpmtv.errors import UnsupportedModelError
from dpmtv.models.base import ModelAdapter

_ADAPTERS: dict[str, type[ModelAdapter]] = {}


def register(cls: type[ModelAdapter]) -> type[ModelAdapter]:
    for model_type in cls.model_types:
        _ADAPTERS[model_type] = cls
    return cls


def adapter_for(model_type: str) -> type[ModelAdapter]:
    _load_families()
    try:
        return _ADAPTERS[model_type]
    except KeyError:
        raise UnsupportedModelError(
            f"no dpmtv adapter for model_type '{model_type}'; supported families: "
            f"{', '.join(supported_families())}"
        ) from None


def supported_families() -> list[str]:
    _load_families()
    return sorted({f"{cls.display_name} ({', '.join(cls.model_types)})" for cls in _ADAPTERS.values()})


def _load_families() -> None:
    # Importing the family modules registers them; done lazily to keep `import dpmtv` light.
    from dpmtv.models import families  # noqa: F401
