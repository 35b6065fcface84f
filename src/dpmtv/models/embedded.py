"""The packaged embedded model (``--model embedded``): a standard checkpoint folder inside the
package, loaded through the same LLaVA adapter as any user checkpoint."""

from __future__ import annotations

from pathlib import Path

from dpmtv.errors import ModelError


def embedded_checkpoint_path() -> Path:
    from dpmtv.embedded import checkpoint_path

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
