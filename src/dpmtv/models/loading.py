"""Load a VLM checkpoint (local folder or hub id) with its processor and adapter."""

from __future__ import annotations

import dataclasses
import json
import warnings
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
from dpmtv.models.checkpoint_files import check_checkpoint_files
from dpmtv.models.embedded import resolve_model_path
from dpmtv.models.processors import PROCESSOR_ERRORS, processor_error
from dpmtv.models.registry import UNTESTED_WARNING, adapter_for, is_contract_tested

_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


DEFAULTS_FILE = "dpmtv_defaults.json"  # optional, public: a checkpoint's shipped dpmtv settings


@dataclass
class LoadedModel:
    """A model ready for dpmtv, as :func:`load_model` returns it: the transformers ``model`` (in
    eval mode), its ``processor``, the family ``adapter`` that knows where its heads are
    (``adapter.geometry``: layers, heads, head dimension), the ``name_or_path`` it came from, and
    the checkpoint's ``dpmtv_defaults.json`` if it has one."""

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
class LoadOptions:
    """How :func:`load_model` loads a checkpoint beyond its path, dtype and device: a declarative
    adapter spec, remote code, a hub revision, transformers' attention implementation and a PEFT
    LoRA adapter merged into the weights."""

    adapter_spec: str | Path | None = None
    trust_remote_code: bool = False
    revision: str | None = None
    attn_implementation: str | None = None
    adapter_weights: str | Path | None = None


_LOAD_OPTIONS: ContextVar[LoadOptions | None] = ContextVar("dpmtv_load_options", default=None)


@contextmanager
def load_options(**options: Any) -> Iterator[None]:
    """Defaults for :func:`load_model`'s keyword arguments of :class:`LoadOptions` inside the
    block (how the CLI's shared model options reach every command)."""
    token = _LOAD_OPTIONS.set(LoadOptions(**options))
    try:
        yield
    finally:
        _LOAD_OPTIONS.reset(token)


def current_load_options() -> LoadOptions:
    """The enclosing :func:`load_options` (defaults outside any block), e.g. to load the same
    model again in another process."""
    return _LOAD_OPTIONS.get() or LoadOptions()


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
                f"--device {device} needs accelerate: pip install -e '.[device-map]' in the dpmtv "
                f"source checkout ({exc})"
            ) from None
        # a package the checkpoint's config asks for (bitsandbytes): transformers names it
        raise ModelError(f"cannot load the checkpoint at '{path}': {exc}".splitlines()[0]) from None
    return (model if move_to is None else model.to(move_to)).eval()


def read_head_geometry(name_or_path: str | Path) -> HeadGeometry:
    """The decoder's head geometry from the checkpoint's config alone (no weights loaded)."""
    from transformers import AutoConfig

    path = resolve_model_path(name_or_path)
    _check_local_folder(path)
    path = resolve_revision(path, current_load_options().revision)
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
    name_or_path: str | Path | nn.Module,
    *,
    processor: Any = None,
    dtype: str | None = None,
    device: str | None = None,
    **options: Any,
) -> LoadedModel:
    """Load a checkpoint, or wrap a model the caller already holds.

    A folder or hub id loads through ``AutoModelForImageTextToText`` and the family's adapter, or,
    with ``adapter_spec`` (a JSON file, see :mod:`dpmtv.models.spec`), through the spec's model
    class and declarative adapter; ``dtype`` defaults to float32 and ``device`` to the CPU.
    ``options`` are :class:`LoadOptions` fields (``adapter_spec``, ``trust_remote_code``,
    ``revision``, ``attn_implementation``, ``adapter_weights``); each defaults to the enclosing
    :func:`load_options` block. ``trust_remote_code`` runs the checkpoint's own Python code and is
    never on unless asked.

    An already constructed transformers model (loaded with the caller's own revision, attention
    implementation, device map or quantisation config) is passed with its ``processor``; it is
    used as it is (put in eval mode, neither moved nor cast), so ``dtype``/``device`` and the
    loading options do not apply."""
    if isinstance(name_or_path, nn.Module):
        if dtype is not None or device is not None or options:
            raise ModelError(
                "load_model(model, processor=...) uses the model as it was loaded; dtype, device "
                f"and loading options ({', '.join(sorted(options)) or 'dtype/device'}) apply only "
                "when dpmtv loads the checkpoint itself"
            )
        return wrap_loaded_model(name_or_path, processor)
    opts = dataclasses.replace(current_load_options(), **options)
    if opts.adapter_weights is not None and opts.adapter_spec is not None:
        raise ModelError(
            "--adapter-weights (a LoRA adapter) cannot be combined with --model-spec spec.json yet"
        )
    path = resolve_model_path(name_or_path)
    _check_local_folder(path)
    files = resolve_revision(path, opts.revision)
    load = {"dtype": dtype or "float32", "device": device or "cpu"}
    if opts.attn_implementation is not None:
        load["attn_implementation"] = opts.attn_implementation
    if opts.adapter_spec is not None:
        loaded = _load_with_spec(files, opts.adapter_spec, trust_remote_code=opts.trust_remote_code, **load)
    else:
        loaded = _load_auto(files, trust_remote_code=opts.trust_remote_code, **load)
    loaded.name_or_path = path
    if opts.adapter_weights is not None:
        from dpmtv.models.lora import merge_lora_adapter

        merge_lora_adapter(loaded, opts.adapter_weights)
    return loaded


def _load_auto(path: str, *, trust_remote_code: bool, **load: Any) -> LoadedModel:
    from transformers import AutoModelForImageTextToText

    config = _read_config(path, trust_remote_code)
    check_checkpoint_files(path, config)
    adapter_cls = adapter_for(config.model_type)
    warn_if_untested(config.model_type)
    try:
        processor = adapter_cls.load_processor(path)
    except PROCESSOR_ERRORS as exc:  # a family file's own loading; the generic one names itself
        name = adapter_cls.display_name or config.model_type
        raise processor_error(name, config.model_type, f"cannot load the processor at '{path}'", exc) from exc
    try:
        model = _from_pretrained(AutoModelForImageTextToText, path, **load)
    except ValueError as exc:
        if "attn_implementation" in str(exc):
            raise ModelError(
                f"--attn-implementation {load.get('attn_implementation')}: {exc}".splitlines()[0]
            ) from exc
        raise UnsupportedModelError(
            f"model_type '{config.model_type}' at '{path}' is not an image-text-to-text model "
            f"transformers can load ({exc}); for a remote-code checkpoint pass --model-spec spec.json"
        ) from exc
    return LoadedModel(model, processor, adapter_cls(model, processor), path, _read_defaults(path))


def wrap_loaded_model(model: nn.Module, processor: Any) -> LoadedModel:
    """A :class:`LoadedModel` around a model and processor the caller constructed."""
    config = getattr(model, "config", None)
    if config is None or not hasattr(model, "get_decoder"):
        raise ModelError(
            f"load_model got a {type(model).__name__}, not a transformers model "
            "(a PreTrainedModel with a config); pass a checkpoint folder or the model "
            "AutoModelForImageTextToText.from_pretrained returned"
        )
    if processor is None:
        raise ModelError(
            f"load_model({type(model).__name__}) needs processor=: the processor the model was "
            "loaded with (AutoProcessor.from_pretrained of the same checkpoint)"
        )
    adapter = adapter_for(config.model_type)(model.eval(), processor)
    warn_if_untested(config.model_type)
    name = str(getattr(model, "name_or_path", "") or getattr(config, "_name_or_path", "") or "")
    defaults = _read_defaults(name) if name and Path(name).is_dir() else {}
    return LoadedModel(model, processor, adapter, name or type(model).__name__, defaults)


def warn_if_untested(model_type: str) -> None:
    if not is_contract_tested(model_type):
        warnings.warn(UNTESTED_WARNING.format(model_type=model_type), stacklevel=3)


def resolve_revision(path: str, revision: str | None) -> str:
    """The folder to load: ``path`` itself, or with ``revision`` the hub snapshot of that
    revision (from the local cache, or fetched as ``from_pretrained`` would fetch it), so the
    config, the weights and the processor all come from the same commit."""
    if revision is None:
        return path
    if Path(path).exists():
        raise ModelError(
            f"--revision {revision} selects a revision of a hub model, but '{path}' is a local "
            "folder; check that revision out into the folder instead"
        )
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import HfHubHTTPError, LocalEntryNotFoundError

    try:
        return snapshot_download(path, revision=revision)
    except (LocalEntryNotFoundError, HfHubHTTPError, OSError, ValueError) as exc:
        raise ModelError(f"cannot find revision '{revision}' of '{path}': {exc}") from exc


def _read_config(path: str, trust_remote_code: bool) -> Any:
    from transformers import AutoConfig

    try:
        return AutoConfig.from_pretrained(path, trust_remote_code=trust_remote_code)
    except (OSError, ValueError) as exc:
        if not trust_remote_code and "trust_remote_code" in str(exc):
            raise ModelError(
                f"the checkpoint at '{path}' needs its own Python code (remote code), which dpmtv "
                "runs only when asked: pass --model-spec spec.json and --trust-remote-code "
                "(trust_remote_code=True) if you trust its source"
            ) from exc
        raise ModelError(f"cannot read the model config at '{path}': {exc}") from exc


def _load_with_spec(path: str, spec_file: str | Path, *, trust_remote_code: bool, **load: Any) -> LoadedModel:
    import transformers

    from dpmtv.models.spec import SpecAdapter, load_spec

    spec = load_spec(spec_file)
    check_checkpoint_files(path, _read_config(path, trust_remote_code))
    model_cls = getattr(transformers, spec.model_class, None)
    if model_cls is None or not hasattr(model_cls, "from_pretrained"):
        raise ModelError(
            f"adapter spec '{spec_file}': model_class '{spec.model_class}' is not a transformers Auto class"
        )
    model = _from_pretrained(model_cls, path, trust_remote_code=trust_remote_code, **load)
    processor_cls = (
        transformers.AutoProcessor if spec.images.kind == "processor" else transformers.AutoTokenizer
    )
    processor = processor_cls.from_pretrained(path, trust_remote_code=trust_remote_code)
    return LoadedModel(model, processor, SpecAdapter(model, processor, spec), path, _read_defaults(path))


def _read_defaults(path: str) -> dict:
    file = Path(path) / DEFAULTS_FILE
    return json.loads(file.read_text(encoding="utf-8")) if file.is_file() else {}
