"""dpmtv: differentially private many-shot multimodal in-context learning (DP-MTV).

The curated public API. Heavy modules (torch, transformers) load on first use of a name.
"""

from __future__ import annotations

import importlib
from typing import Any

from dpmtv._version import __version__

_EXPORTS = {
    "apply": "dpmtv.inference",
    "answer_queries": "dpmtv.inference",
    "BuildSettings": "dpmtv.pipeline.build",
    "BuildResult": "dpmtv.pipeline.build",
    "build_task_vector": "dpmtv.pipeline.build",
    "Record": "dpmtv.data.records",
    "load_records": "dpmtv.data.records",
    "HeadSet": "dpmtv.heads",
    "parse_head_spec": "dpmtv.heads",
    "PatchMode": "dpmtv.forward.hooks",
    "capture_last_token": "dpmtv.forward.hooks",
    "overwrite_heads": "dpmtv.forward.hooks",
    "LoadedModel": "dpmtv.models.loading",
    "load_model": "dpmtv.models.loading",
    "supported_families": "dpmtv.models.registry",
    "Example": "dpmtv.data.prompts",
    "Prompt": "dpmtv.data.prompts",
    "TaskVector": "dpmtv.artifact.vector",
    "load_task_vector": "dpmtv.artifact.vector",
    "save_task_vector": "dpmtv.artifact.vector",
}

__all__ = ["__version__", "errors", *sorted(_EXPORTS)]


def __getattr__(name: str) -> Any:
    if name == "errors":
        return importlib.import_module("dpmtv.errors")
    if name in _EXPORTS:
        value = getattr(importlib.import_module(_EXPORTS[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'dpmtv' has no attribute '{name}'")


def __dir__() -> list[str]:
    return sorted(__all__)
