"""OpenAI-compatible HTTP service and web page answering queries with released task vectors.

Every answer is post-processing of an already private release: the server accepts no private
records and keeps no privacy budget. Needs the ``serve`` extra (FastAPI, uvicorn).
"""

from __future__ import annotations

try:
    import fastapi  # noqa: F401
except ImportError as exc:  # pragma: no cover - depends on the installation
    raise ImportError(
        "dpmtv serve needs the serve extra: pip install -e '.[serve]' in the dpmtv source checkout"
    ) from exc

from dpmtv.serve._app import create_app
from dpmtv.serve._served import ServedModel, ServedVector, load_served_model, model_name, parse_vector_spec
from dpmtv.serve._settings import ServeSettings

__all__ = [
    "ServeSettings",
    "ServedModel",
    "ServedVector",
    "create_app",
    "load_served_model",
    "model_name",
    "parse_vector_spec",
]
