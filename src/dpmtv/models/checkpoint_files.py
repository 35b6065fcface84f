"""Checks of a checkpoint's files before transformers or PEFT reads them, so that a damaged or
unknown file is one :class:`~dpmtv.errors.ModelError` naming it instead of a traceback, or worse,
a model loaded without part of what the files say.

Weights: every ``*.safetensors`` file's header is read (without the tensors) by safetensors
itself, which refuses a corrupt header, an empty file and a file shorter than its header says
(truncated). Quantisation: transformers *skips* a ``quant_method`` it does not know (a warning,
then the weights load as they are stored), so a mistyped method would build and be
fingerprinted under a name no loader implements; only transformers' own methods are accepted.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from dpmtv.errors import ModelError


def safetensors_keys(file: Path, what: str) -> list[str]:
    """The tensor names stored in ``file`` (``what`` names it in the error: "model weights",
    "--adapter-weights")."""
    from safetensors import SafetensorError, safe_open

    try:
        with safe_open(str(file), framework="pt") as handle:
            return list(handle.keys())
    except (SafetensorError, OSError) as exc:
        raise ModelError(
            f"{what} '{file}' is not a readable safetensors file ({exc}); it is damaged or "
            "incomplete: copy or download it again"
        ) from None


def check_checkpoint_files(path: str, config: Any) -> None:
    """Refuse a checkpoint folder whose weight files safetensors cannot read, or whose config
    names a quantisation method transformers does not implement."""
    folder = Path(path)
    if folder.is_dir():
        for file in sorted(folder.glob("*.safetensors")):
            safetensors_keys(file, "model weights")
    _check_quant_method(folder / "config.json", getattr(config, "quantization_config", None))


def _check_quant_method(config_file: Path, quantization: Any) -> None:
    from transformers.utils.quantization_config import QuantizationMethod

    if quantization is None:
        return
    fields = quantization if isinstance(quantization, dict) else quantization.to_dict()
    method = fields.get("quant_method")
    method = getattr(method, "value", method)
    known = sorted(str(m.value) for m in QuantizationMethod)
    if method not in known:
        raise ModelError(
            f"'{config_file}': quantization_config.quant_method {method!r} is not a quantisation "
            f"method transformers implements ({', '.join(known)}); fix the config or remove its "
            "quantization_config"
        )
