"""Shared loading step of the image-only processor subclasses.

Several stock processors require a video processor, which needs torchvision; dpmtv feeds only
images, so their family files load a subclass whose ``__init__`` leaves ``video_processor`` out
(transformers reads a processor's sub-processors from that signature). Saved folders keep naming
the stock class, so they stay standard checkpoints.
"""

from __future__ import annotations

from typing import Any

from dpmtv.errors import AdapterError


def load_image_only(processor_cls: type, path: str, display_name: str) -> Any:
    processor = processor_cls.from_pretrained(path)
    if not processor.chat_template:
        raise AdapterError(
            f"{display_name}: no chat template found in '{path}' (chat_template.jinja, "
            "chat_template.json or the tokenizer config); add the checkpoint's template"
        )
    return processor
