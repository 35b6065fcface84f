"""dpmtv's embedded default model and task suite.

- :mod:`dpmtv.embedded.generator`: procedural 24x24 images, the task family, records, episodes;
- :mod:`dpmtv.embedded.checkpoint_format`: config, tokenizer, processor and chat template of the
  small ``LlavaForConditionalGeneration`` trained by ``scripts/train_embedded.py``.

The trained checkpoint ships in ``dpmtv/embedded/checkpoint`` (see :func:`checkpoint_path`).
"""

from __future__ import annotations

import os
from pathlib import Path

CHECKPOINT_DIR = Path(__file__).resolve().parent / "checkpoint"
#: Names another folder in the same format (a model retrained by scripts/train_embedded.py, its
#: heads chosen by scripts/select_embedded_heads.py) to stand in for the packaged one everywhere
#: ``--model embedded``, the embedded benchmark's public heads and ``dpmtv demo`` read it; an
#: environment variable so the demo's worker processes inherit it.
CHECKPOINT_ENV = "DPMTV_EMBEDDED_CHECKPOINT"


def checkpoint_path() -> Path:
    """Folder of the embedded checkpoint (loadable with ``from_pretrained``): the packaged one, or
    the folder named by :data:`CHECKPOINT_ENV`."""
    override = os.environ.get(CHECKPOINT_ENV)
    return Path(override) if override else CHECKPOINT_DIR
