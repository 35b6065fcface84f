"""The packaged embedded model (``--model embedded``): a standard checkpoint folder inside the
package, loaded through the same LLaVA adapter as any user checkpoint.

Its location lives here, with the model loading, so that nothing under ``dpmtv.models`` imports
``dpmtv.embedded`` (the task suite and training code, a higher layer).
"""

from __future__ import annotations

import os
from pathlib import Path

from dpmtv.errors import ModelError

#: The packaged checkpoint: weights, tokenizer, processor, the shipped model's training summary.
CHECKPOINT_DIR = Path(__file__).resolve().parents[1] / "embedded" / "checkpoint"
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


def embedded_checkpoint_path() -> Path:
    path = checkpoint_path()
    if not (path / "config.json").is_file():
        raise ModelError(
            f"the embedded model is missing from this installation ({path}); reinstall dpmtv, or "
            "train it with scripts/train_embedded.py and copy the folder there"
        )
    return path


def resolve_model_path(name_or_path: str | Path) -> str:
    """``embedded`` names the packaged default model; anything else is a folder or hub id."""
    if str(name_or_path) == "embedded":
        return str(embedded_checkpoint_path())
    return str(name_or_path)
