"""Declarative adapters for checkpoints transformers cannot load natively (remote code).

A spec is a small JSON file (``--model-spec spec.json``)::

    {
      "name": "qwen-vl-chat",
      "model_class": "AutoModelForCausalLM",
      "layer_path": "transformer.h.{i}.attn.c_proj",
      "num_layers": "num_hidden_layers",        # an int, or a (dotted) config key
      "num_heads": "num_attention_heads",
      "head_dim": "kv_channels",                # int, config key, or null: hidden_size // heads
      "hidden_size": "hidden_size",             # config key read when head_dim is null
      "prompt": {"prefix": "...", "demonstration": "{images}{question} {answer}\\n",
                 "query": "{images}{question}", "image": "<img>{path}</img>"},
      "images": {"kind": "file_path"}
    }

``layer_path`` names each layer's attention output projection (``{i}`` is the layer index); its
input must be ``num_heads * head_dim`` wide, as for every adapter. The prompt templates take
``{images}`` (the example's images, each rendered with ``prompt.image``), ``{question}`` and
``{answer}``; ``prompt.image`` takes ``{n}`` (the image's 1-based number in the prompt),
``{path}`` and ``{pad}`` (``images.pad_token`` repeated ``images.pad_count`` times).
``images.kind`` says how images reach the model:

* ``processor`` — the checkpoint's ``AutoProcessor(text=..., images=...)``, one list per prompt;
* ``pixel_values`` — resized to ``size`` px, scaled to [0, 1], normalised with ``mean``/``std``,
  stacked over the batch in prompt order and passed as the ``input_name`` keyword;
* ``file_path`` — written to temporary PNG files whose paths go into the text (how the original
  Qwen-VL reads images: its tokenizer and model open the paths in ``<img>...</img>``).

Remote code runs only with ``trust_remote_code=True``, which the user grants explicitly
(``--trust-remote-code``).
"""

from __future__ import annotations

import itertools
import json
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from dpmtv.data.prompts import Example, Prompt
from dpmtv.errors import AdapterError, InputError
from dpmtv.models.base import HeadGeometry, ModelAdapter
from dpmtv.models.generic import check_projection_widths

IMAGE_KINDS = ("processor", "pixel_values", "file_path")


@dataclass(frozen=True)
class ImageEncoding:
    kind: str = "processor"
    input_name: str = "pixel_values"
    size: int = 224
    mean: tuple[float, ...] = (0.5, 0.5, 0.5)
    std: tuple[float, ...] = (0.5, 0.5, 0.5)
    pad_token: str = ""
    pad_count: int = 0


@dataclass(frozen=True)
class PromptTemplate:
    prefix: str = ""
    demonstration: str = "{images}{question} {answer}\n"
    query: str = "{images}{question}"
    image: str = "<image>"


@dataclass(frozen=True)
class AdapterSpec:
    name: str
    layer_path: str
    num_layers: int | str
    num_heads: int | str
    head_dim: int | str | None = None
    hidden_size: str = "hidden_size"
    model_class: str = "AutoModelForCausalLM"
    prompt: PromptTemplate = field(default_factory=PromptTemplate)
    images: ImageEncoding = field(default_factory=ImageEncoding)
    note: str = ""


def load_spec(path: str | Path) -> AdapterSpec:
    """Read and check a spec file; errors name the file and the field."""
    file = Path(path)
    try:
        raw = json.loads(file.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise InputError(f"adapter spec '{file}': cannot read it as JSON ({exc})") from exc
    try:
        spec = AdapterSpec(
            **{k: v for k, v in raw.items() if k not in ("prompt", "images")},
            prompt=PromptTemplate(**raw.get("prompt", {})),
            images=ImageEncoding(
                **{k: tuple(v) if isinstance(v, list) else v for k, v in raw.get("images", {}).items()}
            ),
        )
    except TypeError as exc:
        raise InputError(f"adapter spec '{file}': {exc} (see docs/design.md, 'Model adapters')") from exc
    _check(spec, file)
    return spec


def _check(spec: AdapterSpec, file: Path) -> None:
    if "{i}" not in spec.layer_path:
        raise InputError(
            f"adapter spec '{file}': layer_path '{spec.layer_path}' has no '{{i}}' for the layer index"
        )
    if spec.images.kind not in IMAGE_KINDS:
        raise InputError(
            f"adapter spec '{file}': images.kind '{spec.images.kind}' is not one of {', '.join(IMAGE_KINDS)}"
        )
    if "{path}" in spec.prompt.image and spec.images.kind != "file_path":
        raise InputError(
            f"adapter spec '{file}': prompt.image uses {{path}} but images.kind is '{spec.images.kind}'"
        )


def config_value(config: Any, key: int | str, spec_name: str) -> int:
    """An int given directly, or read from the config at a dotted key (dicts or attributes)."""
    if isinstance(key, int):
        return key
    value: Any = config
    for part in key.split("."):
        value = value.get(part) if isinstance(value, dict) else getattr(value, part, None)
        if value is None:
            raise AdapterError(f"adapter spec '{spec_name}': the model config has no '{key}'")
    return int(value)


class SpecAdapter(ModelAdapter):
    """A :class:`ModelAdapter` whose sites, geometry and prompt format come from an
    :class:`AdapterSpec`; ``processor`` is the checkpoint's processor (kind ``processor``) or its
    tokenizer (other kinds)."""

    model_types: tuple[str, ...] = ()

    def __init__(self, model: nn.Module, processor: Any, spec: AdapterSpec):
        self.spec = spec
        self.family = self.display_name = spec.name
        super().__init__(model, processor)

    # "file_path" images are files the model opens during its forward call, and pixel values take
    # the model's dtype: encoding stays in the forward pass's process (one background thread).
    prepares_in_workers = False

    @classmethod
    def text_config(cls, config: Any) -> Any:
        """The top-level config (remote-code configs need not nest a text config)."""
        return config

    def head_geometry(self, config: Any) -> HeadGeometry:  # type: ignore[override]
        spec, name = self.spec, self.spec.name
        num_heads = config_value(config, spec.num_heads, name)
        if spec.head_dim is None:
            head_dim = config_value(config, spec.hidden_size, name) // num_heads
        else:
            head_dim = config_value(config, spec.head_dim, name)
        return HeadGeometry(config_value(config, spec.num_layers, name), num_heads, head_dim)

    def _resolve_o_projs(self) -> list[nn.Module]:
        paths = [self.spec.layer_path.format(i=i) for i in range(self.geometry.num_layers)]
        o_projs = []
        for path in paths:
            try:
                o_projs.append(self.model.get_submodule(path))
            except AttributeError:
                raise AdapterError(
                    f"adapter spec '{self.spec.name}': '{path}' does not resolve on "
                    f"{type(self.model).__name__}; check layer_path and num_layers"
                ) from None
        check_projection_widths(o_projs, paths, self.geometry, self.spec.name)
        return o_projs

    # ---- prompts --------------------------------------------------------------------------
    @property
    def tokenizer(self) -> Any:
        return getattr(self.processor, "tokenizer", self.processor)

    def render_text(self, prompt: Prompt, image_paths: Sequence[str] = ()) -> str:
        return self._render(prompt, None, image_paths)

    def render_with_answer(self, prompt: Prompt, answer: str) -> str:
        """The query written as one more demonstration, with ``answer``."""
        return self._render(prompt, answer, ())

    def _render(self, prompt: Prompt, answer: str | None, image_paths: Sequence[str]) -> str:
        template, paths, numbers = self.spec.prompt, iter(image_paths), itertools.count(1)
        pad = self.spec.images.pad_token * self.spec.images.pad_count

        def images(example: Example) -> str:
            return "".join(
                template.image.format(path=next(paths, ""), pad=pad, n=next(numbers)) for _ in example.images
            )

        parts = [template.prefix]
        for demo in prompt.demonstrations:
            parts.append(
                template.demonstration.format(images=images(demo), question=demo.question, answer=demo.answer)
            )
        query = prompt.query
        last = template.query if answer is None else template.demonstration
        parts.append(last.format(images=images(query), question=query.question, answer=answer))
        return "".join(parts)

    def encode(self, prompts: Sequence[Prompt]) -> dict[str, torch.Tensor]:
        kind = self.spec.images.kind
        if kind == "processor":
            return super().encode(prompts)
        self.tokenizer.padding_side = "left"
        if kind == "file_path":
            folder = self._fresh_image_folder()
            texts = [self.render_text(p, _write_images(p, folder, row)) for row, p in enumerate(prompts)]
            batch = dict(self.tokenizer(texts, padding=True, return_tensors="pt"))
        else:
            batch = dict(
                self.tokenizer([self.render_text(p) for p in prompts], padding=True, return_tensors="pt")
            )
            images = [image for prompt in prompts for image in prompt.all_images()]
            if images:
                batch[self.spec.images.input_name] = self._pixel_values(images)
        device = self.input_device  # once: the property walks the parameters
        return {key: value.to(device) for key, value in batch.items()}

    def _fresh_image_folder(self) -> Path:
        """A private temporary folder holding only this batch's images: the model opens the
        paths during the forward call that follows ``encode``, so the files outlive ``encode``
        and are deleted at the next call or when the adapter is garbage-collected."""
        self._image_folder = tempfile.TemporaryDirectory(prefix="dpmtv-images-")
        return Path(self._image_folder.name)

    def _pixel_values(self, images: list) -> torch.Tensor:
        enc = self.spec.images
        arrays = [
            np.asarray(image.convert("RGB").resize((enc.size, enc.size)), dtype=np.float32) / 255.0
            for image in images
        ]
        pixels = torch.from_numpy(np.stack(arrays)).permute(0, 3, 1, 2)  # (N, 3, S, S)
        mean, std = torch.tensor(enc.mean).view(1, 3, 1, 1), torch.tensor(enc.std).view(1, 3, 1, 1)
        return ((pixels - mean) / std).to(next(self.model.parameters()).dtype)

    @property
    def eos_token_ids(self) -> list[int]:
        config = getattr(self.model, "generation_config", None)
        ids = getattr(config, "eos_token_id", None) if config is not None else None
        ids = self.tokenizer.eos_token_id if ids is None else ids
        return [ids] if isinstance(ids, int) else list(ids or [])


def _write_images(prompt: Prompt, folder: Path, row: int) -> list[str]:
    paths = []
    for index, image in enumerate(prompt.all_images()):
        path = folder / f"{row}-{index}.png"
        image.convert("RGB").save(path)
        paths.append(str(path))
    return paths
