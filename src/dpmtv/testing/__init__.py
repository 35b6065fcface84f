"""Tiny random-weight checkpoints of the real architectures, built offline.

For tests and for the pipeline demo before a trained model is available: their outputs are
meaningless. Each family module defines ``build(out_dir, *, seed) -> Path`` that writes a standard
checkpoint folder (config, safetensors weights, tokenizer, processor, chat template) loadable with
``from_pretrained``.
"""

from __future__ import annotations

import importlib
import pkgutil
from pathlib import Path

from dpmtv.errors import UnsupportedModelError

TINY_FAMILIES = tuple(sorted(m.name for m in pkgutil.iter_modules(__path__) if not m.name.startswith("_")))


def build_tiny_checkpoint(family: str, out_dir: str | Path, *, seed: int = 0) -> Path:
    """Write a tiny random-weight checkpoint of ``family`` (one of :data:`TINY_FAMILIES`, e.g.
    ``"llava"``) into ``out_dir`` and return the folder; ``seed`` fixes the weights. It loads like
    any checkpoint (``dpmtv.load_model(path)``, ``--model PATH``); its answers are meaningless.
    Example::

        path = build_tiny_checkpoint("llava", "my-vlm")  # then: dpmtv build --model my-vlm ...
    """
    if family not in TINY_FAMILIES:
        raise UnsupportedModelError(f"no tiny builder for '{family}'; available: {', '.join(TINY_FAMILIES)}")
    module = importlib.import_module(f"dpmtv.testing.{family}")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    return module.build(out, seed=seed)
