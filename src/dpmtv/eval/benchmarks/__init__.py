"""Benchmarks by name. Each loader reads a local copy in its published layout from
``--benchmark-root`` (``embedded`` needs none) and returns a :class:`Benchmark`: a demonstration
pool (private), queries and a scorer. Loaders are imported on first use."""

from __future__ import annotations

import importlib
from pathlib import Path

from dpmtv.errors import ParameterError
from dpmtv.eval.benchmarks.base import Benchmark, LoadOptions
from dpmtv.eval.benchmarks.local import load_record_files

__all__ = ["BENCHMARKS", "Benchmark", "LoadOptions", "benchmark_names", "load_benchmark", "load_record_files"]

#: name -> (module, loader function, layout constant or None when no files are needed)
BENCHMARKS: dict[str, tuple[str, str, str | None]] = {
    "vizwiz": ("vqa", "load_vizwiz", "VIZWIZ_LAYOUT"),
    "ok-vqa": ("vqa", "load_okvqa", "OKVQA_LAYOUT"),
    "flowers102": ("episodes", "load_flowers102", "FLOWERS_LAYOUT"),
    "cub-200": ("episodes", "load_cub200", "CUB_LAYOUT"),
    "dtd": ("episodes", "load_dtd", "DTD_LAYOUT"),
    "vqa-rad": ("medical", "load_vqa_rad", "VQA_RAD_LAYOUT"),
    "slake": ("medical", "load_slake", "SLAKE_LAYOUT"),
    "pathvqa": ("medical", "load_pathvqa", "PATHVQA_LAYOUT"),
    "embedded": ("embedded", "load_embedded", None),
}
_ALIASES = {
    "okvqa": "ok-vqa",
    "flowers": "flowers102",
    "cub": "cub-200",
    "cub200": "cub-200",
    "vqarad": "vqa-rad",
    "path-vqa": "pathvqa",
}


def benchmark_names() -> list[str]:
    return list(BENCHMARKS)


def load_benchmark(
    name: str, *, root: str | Path | None = None, options: LoadOptions | None = None
) -> Benchmark:
    """Load ``name`` (``embedded:TASK`` picks an embedded task) from ``root``.

    Raises:
        ParameterError: an unknown name (lists the known ones), or no root for a file benchmark.
        RecordError: a missing or malformed file (names it and shows the expected layout).
    """
    options = options or LoadOptions()
    base, _, variant = name.strip().lower().partition(":")
    base = _ALIASES.get(base, base)
    if base not in BENCHMARKS:
        raise ParameterError(f"unknown benchmark '{name}'; known: {', '.join(BENCHMARKS)}")
    module_name, loader, layout = BENCHMARKS[base]
    module = importlib.import_module(f"{__name__}.{module_name}")
    if layout is not None and root is None:
        raise ParameterError(
            f"benchmark '{base}' reads a local copy: pass --benchmark-root DIR. Expected layout:\n"
            f"{getattr(module, layout)}"
        )
    if variant:
        options = LoadOptions(options.max_train, options.max_test, options.split_seed, variant)
    return getattr(module, loader)(Path(root) if root is not None else None, options)
