"""Load a VLM checkpoint (local folder or hub id) with its processor and adapter."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import nn

from dpmtv.errors import ModelError, UnsupportedModelError
from dpmtv.models.base import HeadGeometry, ModelAdapter
from dpmtv.models.embedded import resolve_model_path
from dpmtv.models.registry import adapter_for

_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


DEFAULTS_FILE = "dpmtv_defaults.json"  # optional, public: a checkpoint's shipped dpmtv settings


@dataclass
class LoadedModel:
    model: nn.Module
    processor: Any
    adapter: ModelAdapter
    name_or_path: str
    defaults: dict = field(default_factory=dict)  # the checkpoint's dpmtv_defaults.json, if any

    @property
    def patch_mode(self) -> str:
        """How to patch at inference unless told otherwise: the checkpoint's recommendation, else
        MTV's every-call mode."""
        return self.defaults.get("patch_mode", "every-call")


@dataclass(frozen=True)
class RemoteCodeOptions:
    adapter_spec: str | Path | None = None
    trust_remote_code: bool = False


_REMOTE_CODE_OPTIONS: ContextVar[RemoteCodeOptions | None] = ContextVar("dpmtv_remote_code", default=None)


@contextmanager
def remote_code_options(*, adapter_spec: str | Path | None, trust_remote_code: bool) -> Iterator[None]:
    """Defaults for :func:`load_model`'s ``adapter_spec``/``trust_remote_code`` inside the block."""
    token = _REMOTE_CODE_OPTIONS.set(RemoteCodeOptions(adapter_spec, trust_remote_code))
    try:
        yield
    finally:
        _REMOTE_CODE_OPTIONS.reset(token)


def current_remote_code_options() -> RemoteCodeOptions:
    """The enclosing :func:`remote_code_options` (defaults outside any block), e.g. to load the
    same model again in another process."""
    return _REMOTE_CODE_OPTIONS.get() or RemoteCodeOptions()


def parse_dtype(name: str) -> torch.dtype:
    try:
        return _DTYPES[name]
    except KeyError:
        raise ModelError(f"unknown dtype '{name}'; use one of {', '.join(_DTYPES)}") from None


DEVICE_MAP_PREFIX = "map:"  # --device map:auto spreads a large model over the GPUs (device_map)


def resolve_device(device: str) -> str:
    """``auto``: the GPU when torch sees one, else the CPU; any other name is torch's."""
    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    return device


def _placement(device: str) -> tuple[dict[str, Any], str | None]:
    """(``from_pretrained`` keyword arguments, the device to move the model to afterwards)."""
    if device.startswith(DEVICE_MAP_PREFIX):
        return {"device_map": device[len(DEVICE_MAP_PREFIX) :]}, None
    return {}, resolve_device(device)


def _from_pretrained(model_cls, path: str, *, dtype: str, device: str, **kwargs) -> nn.Module:
    """Weights in ``dtype`` on ``device`` (or over the GPUs with ``map:...``), in eval mode."""
    placement, move_to = _placement(device)
    try:
        model = model_cls.from_pretrained(path, dtype=parse_dtype(dtype), **placement, **kwargs)
    except ImportError as exc:
        if placement:
            raise ModelError(
                f"--device {device} needs accelerate: pip install 'dpmtv[device-map]' ({exc})"
            ) from None
        raise
    return (model if move_to is None else model.to(move_to)).eval()


def read_head_geometry(name_or_path: str | Path) -> HeadGeometry:
    """The decoder's head geometry from the checkpoint's config alone (no weights loaded)."""
    from transformers import AutoConfig

    path = resolve_model_path(name_or_path)
    _check_local_folder(path)
    try:
        config = AutoConfig.from_pretrained(path)
    except (OSError, ValueError) as exc:
        raise ModelError(f"cannot read the model config at '{path}': {exc}") from exc
    return adapter_for(config.model_type).head_geometry(config)


def _check_local_folder(path: str) -> None:
    """A path that does not exist is named as a missing folder; only a bare ``owner/name`` is
    taken for a hub id (which this library never downloads by itself)."""
    if Path(path).exists():
        return
    looks_local = path.startswith(("/", ".", "~")) or path.count("/") != 1
    if looks_local:
        raise ModelError(f"model folder '{path}' does not exist; pass the folder of a local checkpoint")


def load_model(
    name_or_path: str | Path,
    *,
    dtype: str = "float32",
    device: str = "cpu",
    adapter_spec: str | Path | None = None,
    trust_remote_code: bool | None = None,
) -> LoadedModel:
    """Load through ``AutoModelForImageTextToText`` and the family's adapter, or, with
    ``adapter_spec`` (a JSON file, see :mod:`dpmtv.models.spec`), through the spec's model class
    and declarative adapter. ``trust_remote_code`` runs the checkpoint's own Python code; it is
    never on unless the caller asks. Both default to the enclosing :func:`remote_code_options`
    block (how the CLI's ``--adapter``/``--trust-remote-code`` reach every command)."""
    defaults = _REMOTE_CODE_OPTIONS.get() or RemoteCodeOptions()
    adapter_spec = defaults.adapter_spec if adapter_spec is None else adapter_spec
    trust_remote_code = defaults.trust_remote_code if trust_remote_code is None else trust_remote_code
    path = resolve_model_path(name_or_path)
    _check_local_folder(path)
    if adapter_spec is not None:
        return _load_with_spec(
            path, adapter_spec, dtype=dtype, device=device, trust_remote_code=trust_remote_code
        )
    from transformers import AutoModelForImageTextToText

    config = _read_config(path, trust_remote_code)
    adapter_cls = adapter_for(config.model_type)
    processor = adapter_cls.load_processor(path)
    try:
        model = _from_pretrained(AutoModelForImageTextToText, path, dtype=dtype, device=device)
    except ValueError as exc:
        raise UnsupportedModelError(
            f"model_type '{config.model_type}' at '{path}' is not an image-text-to-text model "
            f"transformers can load ({exc}); for a remote-code checkpoint pass --adapter spec.json"
        ) from exc
    return LoadedModel(model, processor, adapter_cls(model, processor), path, _read_defaults(path))


def _read_config(path: str, trust_remote_code: bool) -> Any:
    from transformers import AutoConfig

    try:
        return AutoConfig.from_pretrained(path, trust_remote_code=trust_remote_code)
    except (OSError, ValueError) as exc:
        if not trust_remote_code and "trust_remote_code" in str(exc):
            raise ModelError(
                f"the checkpoint at '{path}' needs its own Python code (remote code), which dpmtv "
                "runs only when asked: pass --adapter spec.json and --trust-remote-code "
                "(trust_remote_code=True) if you trust its source"
            ) from exc
        raise ModelError(f"cannot read the model config at '{path}': {exc}") from exc


def _load_with_spec(
    path: str, spec_file: str | Path, *, dtype: str, device: str, trust_remote_code: bool
) -> LoadedModel:
    import transformers

    from dpmtv.models.spec import SpecAdapter, load_spec

    spec = load_spec(spec_file)
    _read_config(path, trust_remote_code)
    model_cls = getattr(transformers, spec.model_class, None)
    if model_cls is None or not hasattr(model_cls, "from_pretrained"):
        raise ModelError(
            f"adapter spec '{spec_file}': model_class '{spec.model_class}' is not a transformers Auto class"
        )
    model = _from_pretrained(model_cls, path, dtype=dtype, device=device, trust_remote_code=trust_remote_code)
    processor_cls = (
        transformers.AutoProcessor if spec.images.kind == "processor" else transformers.AutoTokenizer
    )
    processor = processor_cls.from_pretrained(path, trust_remote_code=trust_remote_code)
    return LoadedModel(model, processor, SpecAdapter(model, processor, spec), path, _read_defaults(path))


def _read_defaults(path: str) -> dict:
    file = Path(path) / DEFAULTS_FILE
    return json.loads(file.read_text(encoding="utf-8")) if file.is_file() else {}
