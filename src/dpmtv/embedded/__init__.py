"""dpmtv's embedded default model and task suite.

- :mod:`dpmtv.embedded.generator`: procedural 24x24 images, the task family, records, episodes;
- :mod:`dpmtv.embedded.checkpoint_format`: config, tokenizer, processor and chat template of the
  small ``LlavaForConditionalGeneration`` trained by ``scripts/train_embedded.py``.

The trained checkpoint ships in ``dpmtv/embedded/checkpoint`` (see :func:`checkpoint_path`).
"""

from __future__ import annotations

from pathlib import Path

CHECKPOINT_DIR = Path(__file__).resolve().parent / "checkpoint"


def checkpoint_path() -> Path:
    """Folder of the packaged embedded checkpoint (loadable with ``from_pretrained``)."""
    return CHECKPOINT_DIR
