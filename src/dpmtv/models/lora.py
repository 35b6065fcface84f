"""A PEFT LoRA adapter merged into a loaded model, and recorded in its identity.

The adapter's low-rank updates are merged into the base weights (``merge_and_unload``), so the
model dpmtv hooks is a plain transformers model computing what base + adapter computes. The
adapter may touch layers other than the attention output projections (``q_proj``, an MLP)
whose change the attention fingerprint would not see, so the merged model's config records the
adapter's own digest: ``config_sha256``, checked whenever a vector is applied, then differs from
the base model's and from any other adapter's.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from dpmtv.errors import ModelError

ADAPTER_CONFIG = "adapter_config.json"
ADAPTER_WEIGHTS = ("adapter_model.safetensors", "adapter_model.bin")
CONFIG_KEY = "dpmtv_lora_adapter"  # where the merged model's config records the adapter
# adapter_config.json keys that say where the adapter came from, not what it computes
_VOLATILE_ADAPTER_KEYS = {"base_model_name_or_path", "revision", "peft_version", "auto_mapping"}


def merge_lora_adapter(loaded: Any, folder: str | Path) -> None:  # a models.loading.LoadedModel
    """Merge the PEFT adapter saved in ``folder`` into ``loaded.model`` in place and re-attach
    the family adapter to the merged modules."""
    folder = Path(folder)
    digest = adapter_sha256(folder)
    try:
        from peft import PeftModel
    except ImportError:
        raise ModelError(
            f"--adapter-weights {folder} needs peft: pip install -e '.[lora]' in the dpmtv source checkout"
        ) from None
    try:
        merged = PeftModel.from_pretrained(loaded.model, str(folder)).merge_and_unload()
    except (ValueError, KeyError, RuntimeError, OSError) as exc:
        raise ModelError(
            f"--adapter-weights {folder}: cannot apply this PEFT adapter to '{loaded.name_or_path}': {exc}"
        ) from exc
    setattr(merged.config, CONFIG_KEY, {"sha256": digest, "folder_name": folder.name})
    loaded.model = merged.eval()
    loaded.adapter = type(loaded.adapter)(merged, loaded.processor)


def adapter_sha256(folder: Path) -> str:
    """SHA-256 of the adapter's configuration (without where it came from) and weight file."""
    config_file = folder / ADAPTER_CONFIG
    weights = next((folder / name for name in ADAPTER_WEIGHTS if (folder / name).is_file()), None)
    if not config_file.is_file() or weights is None:
        raise ModelError(
            f"--adapter-weights {folder}: not a PEFT adapter folder (expected {ADAPTER_CONFIG} and "
            f"{ADAPTER_WEIGHTS[0]}, as PeftModel.save_pretrained writes)"
        )
    try:
        config = json.loads(config_file.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ModelError(f"--adapter-weights {folder}: cannot read {ADAPTER_CONFIG}: {exc}") from exc
    if config.get("peft_type") != "LORA":
        raise ModelError(
            f"--adapter-weights {folder}: peft_type is {config.get('peft_type')!r}; dpmtv merges "
            "LoRA adapters only ('LORA')"
        )
    stable = {key: value for key, value in config.items() if key not in _VOLATILE_ADAPTER_KEYS}
    digest = hashlib.sha256(json.dumps(stable, sort_keys=True, default=str).encode())
    digest.update(weights.read_bytes())
    return digest.hexdigest()
