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
import warnings
from pathlib import Path
from typing import Any

from dpmtv.errors import ModelError
from dpmtv.models.checkpoint_files import safetensors_keys

ADAPTER_CONFIG = "adapter_config.json"
ADAPTER_WEIGHTS = "adapter_model.safetensors"
PICKLED_WEIGHTS = "adapter_model.bin"  # refused: unpickling runs code
CONFIG_KEY = "dpmtv_lora_adapter"  # where the merged model's config records the adapter
# adapter_config.json keys that say where the adapter came from, not what it computes
_VOLATILE_ADAPTER_KEYS = {"base_model_name_or_path", "revision", "peft_version", "auto_mapping"}


def merge_lora_adapter(loaded: Any, folder: str | Path) -> None:  # a models.loading.LoadedModel
    """Merge the PEFT adapter saved in ``folder`` into ``loaded.model`` in place and re-attach
    the family adapter to the merged modules. Refused before anything is merged: an adapter whose
    weights do not cover exactly the LoRA modules PEFT puts on this base (another family's
    adapter leaves some at their initial values, which PEFT only warns about)."""
    folder = Path(folder)
    digest = adapter_sha256(folder)
    try:
        from peft import PeftModel
        from peft.utils import get_peft_model_state_dict
    except ImportError:
        raise ModelError(
            f"--adapter-weights {folder}: needs peft: pip install -e '.[lora]' in the dpmtv source checkout"
        ) from None
    try:
        with warnings.catch_warnings():  # PEFT's missing-keys warning: compared by name below
            warnings.filterwarnings("ignore", message="Found missing adapter keys")
            peft_model = PeftModel.from_pretrained(loaded.model, str(folder))
        _check_keys(folder, loaded.name_or_path, set(get_peft_model_state_dict(peft_model)))
        merged = peft_model.merge_and_unload()
    except (ValueError, KeyError, RuntimeError, OSError) as exc:
        raise ModelError(
            f"--adapter-weights {folder}: cannot apply this PEFT adapter to '{loaded.name_or_path}': {exc}"
        ) from exc
    setattr(merged.config, CONFIG_KEY, {"sha256": digest, "folder_name": folder.name})
    loaded.model = merged.eval()
    loaded.adapter = type(loaded.adapter)(merged, loaded.processor)


def _check_keys(folder: Path, base: str, expected: set[str]) -> None:
    stored = set(safetensors_keys(folder / ADAPTER_WEIGHTS, "--adapter-weights"))
    missing, unexpected = sorted(expected - stored), sorted(stored - expected)
    if missing or unexpected:
        first = f"no weights for {missing[0]}" if missing else f"weights for no module: {unexpected[0]}"
        raise ModelError(
            f"--adapter-weights {folder}: its weights do not match the LoRA modules of '{base}' "
            f"({len(missing)} missing, {len(unexpected)} unexpected; {first}): it was trained on "
            "another model; nothing was merged or charged"
        )


def adapter_sha256(folder: Path) -> str:
    """SHA-256 of the adapter's configuration (without where it came from) and weight file."""
    config = _adapter_config(folder)
    weights = folder / ADAPTER_WEIGHTS
    safetensors_keys(weights, "--adapter-weights")
    stable = {key: value for key, value in config.items() if key not in _VOLATILE_ADAPTER_KEYS}
    digest = hashlib.sha256(json.dumps(stable, sort_keys=True, default=str).encode())
    digest.update(weights.read_bytes())
    return digest.hexdigest()


def _adapter_config(folder: Path) -> dict[str, Any]:
    """The adapter's configuration, refusing a folder without safetensors weights (a pickled
    ``adapter_model.bin`` is never unpickled: loading one runs code)."""
    config_file, weights = folder / ADAPTER_CONFIG, folder / ADAPTER_WEIGHTS
    if config_file.is_file() and not weights.is_file() and (folder / PICKLED_WEIGHTS).is_file():
        raise ModelError(
            f"--adapter-weights {folder}: {PICKLED_WEIGHTS} is a pickle, which dpmtv never loads "
            f"(unpickling runs code); save the adapter as {ADAPTER_WEIGHTS} with "
            "PeftModel.save_pretrained(folder, safe_serialization=True)"
        )
    if not config_file.is_file() or not weights.is_file():
        raise ModelError(
            f"--adapter-weights {folder}: not a PEFT adapter folder (expected {ADAPTER_CONFIG} and "
            f"{ADAPTER_WEIGHTS}, as PeftModel.save_pretrained writes)"
        )
    try:
        config = json.loads(config_file.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ModelError(f"--adapter-weights {folder}: cannot read {ADAPTER_CONFIG}: {exc}") from exc
    if not isinstance(config, dict):
        raise ModelError(
            f"--adapter-weights {folder}: {ADAPTER_CONFIG} must hold a JSON object (as "
            f"PeftModel.save_pretrained writes), got a {type(config).__name__}"
        )
    if config.get("peft_type") != "LORA":
        raise ModelError(
            f"--adapter-weights {folder}: peft_type is {config.get('peft_type')!r}; dpmtv merges "
            "LoRA adapters only ('LORA')"
        )
    return config
