"""Loading a family's processor, and saying in one line why it cannot be loaded or used.

The generic route: ``AutoProcessor``; when that fails only because the stock processor wants a
video processor (which needs torchvision, or which an image-only checkpoint does not ship), the
processor class is loaded without it — dpmtv feeds images only. The class is derived on the fly
from the family's stock processor (transformers reads a processor's sub-processors from its
``__init__`` signature, so a signature without ``video_processor`` drops it), which is what the
GLM-4V and Qwen-VL family files do by hand. When an image processor itself needs torchvision,
the error says ``pip install torchvision``.
"""

from __future__ import annotations

import functools
import inspect
from typing import Any

from dpmtv.errors import AdapterError

TORCHVISION_HINT = "pip install torchvision"
# Errors transformers raises while building or running a processor (missing files, a backend
# that is not installed, a malformed config, inputs it cannot expand).
PROCESSOR_ERRORS = (OSError, ImportError, ValueError, TypeError, KeyError, AttributeError, IndexError)


def load_stock_or_image_only(path: str, model_type: str, display_name: str) -> Any:
    from transformers import AutoProcessor

    try:
        return AutoProcessor.from_pretrained(path)
    except PROCESSOR_ERRORS as exc:
        processor_cls = _stock_processor_class(model_type)
        if processor_cls is None or not _wants_video_processor(processor_cls, exc):
            raise processor_error(
                display_name, model_type, f"cannot load the processor at '{path}'", exc
            ) from exc
    try:
        return image_only_class(processor_cls).from_pretrained(path)
    except PROCESSOR_ERRORS as exc:
        what = f"cannot load {processor_cls.__name__} without its video processor at '{path}'"
        raise processor_error(display_name, model_type, what, exc) from exc


def processor_error(display_name: str, model_type: str, what: str, exc: BaseException) -> AdapterError:
    """One line: the family, what failed, the processor's own first line, and the fix when the
    fix is torchvision."""
    detail = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
    family = display_name if display_name == model_type else f"{display_name} ({model_type})"
    if "torchvision" in str(exc).lower():
        return AdapterError(f"{family}: {what}: it needs torchvision: {TORCHVISION_HINT} ({detail})")
    return AdapterError(f"{family}: {what}: {type(exc).__name__}: {detail}")


@functools.cache
def image_only_class(processor_cls: type) -> type:
    """``processor_cls`` without its ``video_processor``; saved folders still name the stock class."""

    def __init__(self, image_processor=None, tokenizer=None, chat_template=None, **kwargs):
        processor_cls.__init__(
            self,
            image_processor=image_processor,
            tokenizer=tokenizer,
            video_processor=None,
            chat_template=chat_template,
            **kwargs,
        )

    def to_dict(self) -> dict[str, Any]:
        return {**processor_cls.to_dict(self), "processor_class": processor_cls.__name__}

    name = f"ImageOnly{processor_cls.__name__}"
    return type(name, (processor_cls,), {"__init__": __init__, "to_dict": to_dict, "__module__": __name__})


def _stock_processor_class(model_type: str) -> type | None:
    import transformers
    from transformers.models.auto.processing_auto import PROCESSOR_MAPPING_NAMES

    name = PROCESSOR_MAPPING_NAMES.get(model_type)
    return getattr(transformers, name, None) if isinstance(name, str) else None


def _wants_video_processor(processor_cls: type, exc: BaseException) -> bool:
    """The stock processor takes a video processor, and that is what failed to load."""
    text = str(exc).lower()
    takes_video = "video_processor" in inspect.signature(processor_cls.__init__).parameters
    return takes_video and ("video" in text or "torchvision" in text)
