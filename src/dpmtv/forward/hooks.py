"""Capture and overwrite per-head attention outputs at the last position.

Both work on the *input* of each decoder layer's attention output projection (``o_proj``), which
is ``(B, T, H*d)`` with the heads contiguous, i.e. it reshapes to ``(B, T, H, d)``. Inputs are
left-padded (see ``ModelAdapter.encode``), so position -1 is every row's real last token.

Both are context managers that remove their hooks on exit, also when the block raises.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from enum import Enum
from typing import Any

import numpy as np
import torch

from dpmtv.errors import HeadSpecError
from dpmtv.heads import HeadSet
from dpmtv.models.base import ModelAdapter

# A forward pre-hook on ``o_proj``: (module, positional inputs) -> new inputs, or None to keep them.
PreHook = Callable[[torch.nn.Module, tuple[Any, ...]], tuple[Any, ...] | None]


class PatchMode(str, Enum):
    """When to overwrite: at every forward call (prompt, then each generated token, as MTV does)
    or only at the prompt's prefill call (the only call with more than one position)."""

    EVERY_CALL = "every-call"
    PREFILL_ONLY = "prefill-only"


@dataclass(frozen=True)
class LayerPatch:
    """Values for the selected heads of one layer: ``heads`` (k,) and ``values`` (k, d)."""

    heads: torch.Tensor
    values: torch.Tensor

    @classmethod
    def from_rows(cls, heads: Sequence[int], rows: Any) -> LayerPatch:
        """A patch from per-head rows in ``heads``' order: ``rows`` is ``(k, d)`` or the flat
        ``(k·d,)`` of one layer (an array or a CPU tensor), stored as float32."""
        values = torch.from_numpy(np.array(rows, dtype=np.float32)).reshape(len(heads), -1)  # (k, d)
        return cls(torch.tensor(list(heads)), values)


def layer_patches(per_layer: Mapping[int, object], heads: HeadSet) -> dict[int, LayerPatch]:
    """Per layer of ``heads``, the patch of its heads from ``per_layer[layer]`` (``(k_l, d)`` or
    flat ``(k_l·d,)``): what a released per-layer vector becomes for :func:`overwrite_heads`."""
    return {layer: LayerPatch.from_rows(heads.heads_in(layer), per_layer[layer]) for layer in heads.layers}


class LastTokenCapture:
    """Records, per layer, the heads' outputs at the last position of the latest forward call.

    ``activations[layer]`` is float32 ``(B, H, d)`` on the CPU.
    """

    def __init__(self) -> None:
        self.activations: dict[int, torch.Tensor] = {}


@contextmanager
def capture_last_token(adapter: ModelAdapter, layers: Sequence[int]) -> Iterator[LastTokenCapture]:
    """Record every head's output at the last position of each forward call, for each of ``layers``.

    Inside the block, each forward call sets ``capture.activations[layer]`` to a float32
    ``(B, H, d)`` CPU tensor: that layer's ``o_proj`` input at position -1, split into its ``H``
    heads of width ``d``. Inputs must be left-padded (``adapter.encode`` does it) so that -1 is
    every row's real last token. A layer the model lacks raises ``HeadSpecError`` before any hook
    is placed; the hooks are removed on exit, also when the block raises. Example::

        loaded = dpmtv.load_model("my-vlm")
        inputs = loaded.adapter.encode([dpmtv.Prompt(demonstrations=demos, query=query)])
        with torch.no_grad(), dpmtv.capture_last_token(loaded.adapter, [0, 1]) as capture:
            loaded.model(**inputs)
        capture.activations[0]  # (1, H, d): layer 0's heads at the prompt's last token
    """
    capture = LastTokenCapture()
    geometry = adapter.geometry

    def make_hook(layer: int) -> PreHook:
        def hook(module: torch.nn.Module, args: tuple[Any, ...]) -> None:
            last = args[0][:, -1, :]  # (B, H*d)
            capture.activations[layer] = (
                last.detach().to(torch.float32).reshape(-1, geometry.num_heads, geometry.head_dim)
            ).cpu()

        return hook

    with ExitStack() as stack:
        for layer in _checked_layers(adapter, layers):
            handle = adapter.o_projs[layer].register_forward_pre_hook(make_hook(layer))
            stack.callback(handle.remove)
        yield capture


@contextmanager
def overwrite_heads(
    adapter: ModelAdapter,
    patches: Mapping[int, LayerPatch],
    *,
    mode: PatchMode = PatchMode.EVERY_CALL,
) -> Iterator[None]:
    """Overwrite the given heads' o_proj inputs at the last position with fixed values.

    ``patches`` maps a layer to its :class:`LayerPatch` (heads ``(k,)``, values ``(k, d)``);
    ``TaskVector.layer_patches()`` gives a released vector's. ``mode`` says whether generated tokens are
    patched too (:class:`PatchMode`). Hooks are removed on exit, also when the block raises.
    Answering with a vector goes through :func:`dpmtv.apply`, which uses this with the model's mode.

    The hook runs on every forward call (every generated token), so it does one copy and one
    indexed write: the heads' columns in the flat ``H*d`` row are computed once, and the values
    are converted to the activations' dtype and device once per (dtype, device).
    """
    head_dim = adapter.geometry.head_dim

    def make_hook(patch: LayerPatch) -> PreHook:
        columns = (patch.heads[:, None] * head_dim + torch.arange(head_dim)).reshape(-1)  # (k*d,)
        flat = patch.values.reshape(-1)  # (k*d,), in the order of ``columns``
        placed: dict[tuple[torch.dtype, torch.device], tuple[torch.Tensor, torch.Tensor]] = {}

        def hook(module: torch.nn.Module, args: tuple[Any, ...]) -> tuple[Any, ...] | None:
            hidden = args[0]  # (B, T, H*d)
            if mode is PatchMode.PREFILL_ONLY and hidden.shape[1] == 1:
                return None
            key = (hidden.dtype, hidden.device)
            if key not in placed:
                placed[key] = (columns.to(hidden.device), flat.to(dtype=hidden.dtype, device=hidden.device))
            where, values = placed[key]
            patched = hidden.clone()  # not in place: autograd or the caller may hold the input
            patched[:, -1].index_copy_(-1, where, values.expand(hidden.shape[0], -1))
            return (patched, *args[1:])

        return hook

    with ExitStack() as stack:
        for layer in _checked_layers(adapter, list(patches)):
            patch = _checked_patch(adapter, layer, patches[layer])
            handle = adapter.o_projs[layer].register_forward_pre_hook(make_hook(patch))
            stack.callback(handle.remove)
        yield


@contextmanager
def blend_heads_per_row(
    adapter: ModelAdapter,
    values: Mapping[int, torch.Tensor],
    masks: torch.Tensor,
    *,
    mode: PatchMode = PatchMode.EVERY_CALL,
) -> Iterator[None]:
    """Per-row partial overwrite at the last position, for batched head search.

    Row ``b`` of layer ``l``'s heads becomes ``own + masks[b, l, h] · (values[l][h] − own)``:
    a 0/1 mask patches a head subset per row (e.g. REINFORCE's 32 samples in one batch), and a
    float mask that requires grad gives attribution patching (``∂loss/∂mask`` at 0 is
    ``(value − own)·∂loss/∂own``). ``masks`` is ``(B, num_layers, num_heads)``; ``values[l]`` is
    ``(H, d)`` (shared by all rows) or ``(B, H, d)``. Only layers in ``values`` are hooked. Built
    without in-place writes, so autograd flows to ``masks`` and ``values``. ``mode`` as in
    :func:`overwrite_heads` (the server patches each row with its own vector during generation).
    """
    geometry = adapter.geometry
    expected = (geometry.num_layers, geometry.num_heads)
    if masks.ndim != 3 or tuple(masks.shape[1:]) != expected:
        raise HeadSpecError(
            f"masks have shape {tuple(masks.shape)}, expected (B, {expected[0]}, {expected[1]})"
        )

    def make_hook(layer: int, value: torch.Tensor) -> PreHook:
        def hook(module: torch.nn.Module, args: tuple[Any, ...]) -> tuple[Any, ...] | None:
            hidden = args[0]  # (B, T, H*d)
            if mode is PatchMode.PREFILL_ONLY and hidden.shape[1] == 1:
                return None
            if hidden.shape[0] != masks.shape[0]:
                raise HeadSpecError(f"batch of {hidden.shape[0]} rows but masks for {masks.shape[0]}")
            own = hidden[:, -1].reshape(hidden.shape[0], geometry.num_heads, geometry.head_dim)
            # a device map may run this layer on another device than the masks and values
            mask = masks[:, layer, :, None].to(hidden.device, hidden.dtype)  # (B, H, 1)
            last = own + mask * (value.to(hidden.device, hidden.dtype) - own)  # (B, H, d)
            patched = torch.cat([hidden[:, :-1], last.reshape(hidden.shape[0], 1, -1)], dim=1)
            return (patched, *args[1:])

        return hook

    with ExitStack() as stack:
        for layer in _checked_layers(adapter, list(values)):
            value = _checked_values(adapter, layer, values[layer]).to(masks.device)
            handle = adapter.o_projs[layer].register_forward_pre_hook(make_hook(layer, value))
            stack.callback(handle.remove)
        yield


def _checked_values(adapter: ModelAdapter, layer: int, value: torch.Tensor) -> torch.Tensor:
    geometry = adapter.geometry
    if tuple(value.shape[-2:]) != (geometry.num_heads, geometry.head_dim) or value.ndim not in (2, 3):
        raise HeadSpecError(
            f"layer {layer}: values have shape {tuple(value.shape)}, expected "
            f"([B,] {geometry.num_heads}, {geometry.head_dim})"
        )
    return value


def _checked_layers(adapter: ModelAdapter, layers: Sequence[int]) -> list[int]:
    num_layers = adapter.geometry.num_layers
    for layer in layers:
        if not 0 <= layer < num_layers:
            raise HeadSpecError(f"layer {layer} does not exist: the model has layers 0..{num_layers - 1}")
    return list(layers)


def _checked_patch(adapter: ModelAdapter, layer: int, patch: LayerPatch) -> LayerPatch:
    geometry = adapter.geometry
    heads = torch.as_tensor(patch.heads, dtype=torch.long)
    bad = [int(h) for h in heads if not 0 <= int(h) < geometry.num_heads]
    if bad:
        raise HeadSpecError(
            f"layer {layer}: head {bad[0]} does not exist (heads 0..{geometry.num_heads - 1})"
        )
    if tuple(patch.values.shape) != (len(heads), geometry.head_dim):
        raise HeadSpecError(
            f"layer {layer}: patch values have shape {tuple(patch.values.shape)}, expected "
            f"({len(heads)}, {geometry.head_dim})"
        )
    return LayerPatch(heads, patch.values)
