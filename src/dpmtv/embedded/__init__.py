"""dpmtv's embedded default model and task suite.

- :mod:`dpmtv.embedded.generator`: procedural 24x24 images, the task family, records, episodes;
- :mod:`dpmtv.embedded.checkpoint_format`: config, tokenizer, processor and chat template of the
  small ``LlavaForConditionalGeneration`` trained by ``scripts/train_embedded.py``.

The trained checkpoint ships in ``dpmtv/embedded/checkpoint`` (see :func:`checkpoint_path`).
"""

from __future__ import annotations

from dpmtv.models.embedded import CHECKPOINT_DIR, CHECKPOINT_ENV, checkpoint_path

__all__ = ["CHECKPOINT_DIR", "CHECKPOINT_ENV", "checkpoint_path"]
