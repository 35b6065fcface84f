"""The served model and its task vectors, loaded and checked once at start-up.

Each vector goes through the same checks as ``dpmtv answer``: the artifact's hashes and claim,
its signature by one of the trusted keys when any are given (:func:`dpmtv.artifact.vector.load_task_vector`),
and the model fingerprint (``TaskVector.check_model``).
A vector that fails either is refused with the reason; the server never starts with it.
"""

from __future__ import annotations

import re
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from dpmtv.artifact.vector import TaskVector, load_task_vector
from dpmtv.errors import ArtifactError, HeadSpecError, ParameterError
from dpmtv.forward.hooks import PatchMode
from dpmtv.models.fingerprint import model_identity
from dpmtv.models.loading import LoadedModel, load_model

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:-]{0,63}$")


@dataclass(frozen=True)
class ServedVector:
    """A checked vector, laid out densely for per-row patching."""

    name: str
    path: Path
    vector: TaskVector
    values: dict[int, torch.Tensor]  # layer → (H, d); zeros where the vector has no head
    mask: torch.Tensor  # (L, H) float, 1 where the vector has a head


@dataclass(frozen=True)
class ServedModel:
    loaded: LoadedModel
    name: str  # what clients put in "model" for zero-shot answers
    vectors: dict[str, ServedVector]
    patch_mode: PatchMode
    created: int  # unix seconds, reported by /v1/models

    @property
    def model_names(self) -> list[str]:
        return [*self.vectors, self.name]

    @property
    def image_min_side(self) -> int:
        """The shorter side a received image is reduced to: twice the largest side the image
        processor works at, so the processor's own resize still does the final step."""
        return 2 * processor_side(self.loaded.adapter.processor)


_FALLBACK_SIDE = 1024  # a processor that does not say: keep up to 2048 px on the shorter side


def processor_side(processor: Any) -> int:
    """The largest side, in pixels, the processor resizes images to (its ``size``/``crop_size``
    fields: height/width, shortest/longest edge, or the square root of a pixel budget)."""
    image_processor = getattr(processor, "image_processor", processor)
    sides = []
    for field in ("size", "crop_size"):
        size = getattr(image_processor, field, None)
        entries = dict(size) if isinstance(size, dict) else getattr(size, "__dict__", {})
        for key in ("height", "width", "shortest_edge", "longest_edge", "max_height", "max_width"):
            if isinstance(entries.get(key), int):
                sides.append(entries[key])
        if isinstance(entries.get("max_pixels"), int):
            sides.append(int(entries["max_pixels"] ** 0.5) + 1)
    max_pixels = getattr(image_processor, "max_pixels", None)
    if isinstance(max_pixels, int):
        sides.append(int(max_pixels**0.5) + 1)
    return max(sides) if sides else _FALLBACK_SIDE


def model_name(model: str) -> str:
    """The bare model's name: the last path component of ``--model`` (``embedded``, ``Qwen2-VL-2B``)."""
    name = Path(str(model).rstrip("/")).name
    return name or str(model)


def parse_vector_spec(spec: str) -> tuple[str, Path]:
    """``NAME=path.safetensors`` → (NAME, path)."""
    name, sep, path = spec.partition("=")
    if not sep or not path:
        raise ParameterError(f"--vector '{spec}' must be NAME=path.safetensors")
    if not _NAME.match(name):
        raise ParameterError(
            f"--vector name '{name}' must be 1-64 letters, digits or . _ : - "
            "(starting with a letter or digit)"
        )
    return name, Path(path)


def load_served_model(
    model: str,
    vectors: Sequence[tuple[str, Path]],
    *,
    dtype: str = "float32",
    device: str = "cpu",
    patch_mode: PatchMode | str | None = None,
    trusted_keys: Sequence[Path] = (),
) -> ServedModel:
    """Load the model, then every vector with the ``answer`` checks; refuse the first bad one.
    With ``trusted_keys`` (PEM public keys) every vector must be signed by one of them."""
    name = model_name(model)
    _check_names(name, [vector_name for vector_name, _ in vectors])
    loaded = load_model(model, dtype=dtype, device=device)
    identity = model_identity(loaded.adapter, loaded.name_or_path)
    served = {
        vector_name: _load_vector(vector_name, path, loaded, identity, trusted_keys)
        for vector_name, path in vectors
    }
    mode = PatchMode(patch_mode or loaded.patch_mode)
    return ServedModel(loaded, name, served, mode, int(time.time()))


def _check_names(model: str, names: list[str]) -> None:
    seen: set[str] = set()
    for name in names:
        if name in seen:
            raise ParameterError(f"--vector name '{name}' is given twice; names must be unique")
        if name == model:
            raise ParameterError(f"--vector name '{name}' is the bare model's name; choose another")
        seen.add(name)


def _load_vector(
    name: str, path: Path, loaded: LoadedModel, identity: dict[str, Any], trusted_keys: Sequence[Path]
) -> ServedVector:
    try:
        vector = load_task_vector(path, trusted_keys=trusted_keys)
        vector.check_model(identity)
    except ArtifactError as exc:
        raise type(exc)(f"vector '{name}' refused: {exc}") from exc
    geometry = loaded.adapter.geometry
    device = loaded.adapter.input_device
    values: dict[int, torch.Tensor] = {}
    mask = torch.zeros(geometry.num_layers, geometry.num_heads)
    for (layer, head), value in zip(vector.heads.pairs, vector.values, strict=True):
        if not (0 <= layer < geometry.num_layers and 0 <= head < geometry.num_heads):
            raise HeadSpecError(f"vector '{name}' ({path}): head {layer}.{head} is not in the model")
        layer_values = values.setdefault(layer, torch.zeros(geometry.num_heads, geometry.head_dim))
        layer_values[head] = torch.as_tensor(value, dtype=torch.float32)
        mask[layer, head] = 1.0
    return ServedVector(
        name, path, vector, {layer: v.to(device) for layer, v in values.items()}, mask.to(device)
    )
