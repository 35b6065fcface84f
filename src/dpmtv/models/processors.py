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


# The methods of transformers' PIL image processors that make "convert to RGB, then PIL-resize to
# the processor's size" the first steps: a processor class overriding none of them follows them.
_PIL_PIPELINE_METHODS = (
    "preprocess", "_preprocess", "_preprocess_image_like_inputs", "_prepare_image_like_inputs",
    "process_image", "convert_to_rgb", "resize",
)  # fmt: skip


def presized_images(processor: Any, images: Any) -> Any:
    """``images`` (nested lists of PIL images) each resized now as the processor's image processor
    would resize it first, when that first step is PIL's ``resize`` to one fixed (height, width):
    the processor's own resize is then a copy (Pillow returns a copy at the same size), so its
    outputs are bitwise those of the full-size images (tested), and the full-size pixels are not
    copied to numpy and back to PIL. Other processors, and images the processor would convert
    (not plain RGB: alpha, a transparency key), are left as they are."""
    resize = _fixed_pil_resize(getattr(processor, "image_processor", None))
    if resize is None:
        return images
    return _map_images(images, resize)


def _fixed_pil_resize(image_processor: Any) -> Any:
    """``image -> image.resize(...)`` exactly as ``image_processor`` resizes first, or None."""
    try:
        from PIL import Image
        from transformers.image_processing_backends import PilBackend
    except ImportError:
        return None
    if not isinstance(image_processor, PilBackend) or not getattr(image_processor, "do_resize", False):
        return None
    if any(
        getattr(type(image_processor), name) is not getattr(PilBackend, name)
        for name in _PIL_PIPELINE_METHODS
    ):
        return None
    size, resample = image_processor.size, image_processor.resample
    fixed = getattr(size, "height", None) and getattr(size, "width", None)
    others = ("shortest_edge", "longest_edge", "max_height", "max_width", "min_pixels", "max_pixels")
    if not fixed or any(getattr(size, name, None) for name in others) or not isinstance(resample, int):
        return None
    target = (int(size.width), int(size.height))

    def resize(image: Any) -> Any:
        if not isinstance(image, Image.Image) or image.mode != "RGB" or "transparency" in image.info:
            return image
        return image.resize(target, resample=Image.Resampling(resample), reducing_gap=None)

    return resize


def _map_images(images: Any, resize: Any) -> Any:
    if isinstance(images, list | tuple):
        return type(images)(_map_images(item, resize) for item in images)
    return resize(images)
