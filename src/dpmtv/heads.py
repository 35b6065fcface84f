"""Head sets: which (layer, head) pairs a task vector covers, and the ``--heads`` syntax.

``all``                        every head of every layer
``layers:4-7`` / ``layers:0,2``  every head of the listed layers (ranges inclusive)
``heads:3.1,3.5,10.0``         explicit layer.head pairs
a file path                    JSON list of [layer, head] pairs, or a JSON object with a
                               ``heads`` key holding one (as written by head selection)
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from dpmtv.errors import HeadSpecError
from dpmtv.models.base import HeadGeometry


@dataclass(frozen=True)
class HeadSet:
    """A sorted, duplicate-free tuple of (layer, head) pairs."""

    pairs: tuple[tuple[int, int], ...]

    @classmethod
    def of(cls, pairs: Iterable[Sequence[int]]) -> HeadSet:
        """The set of ``pairs``, sorted, duplicates dropped; an empty set raises ``HeadSpecError``."""
        unique = sorted({(int(layer), int(head)) for layer, head in pairs})
        if not unique:
            raise HeadSpecError("the head set is empty; select at least one head")
        return cls(tuple(unique))

    def __len__(self) -> int:
        return len(self.pairs)

    @property
    def layers(self) -> list[int]:
        """The layers that hold at least one head of the set, ascending."""
        return sorted({layer for layer, _ in self.pairs})

    def heads_in(self, layer: int) -> list[int]:
        """The set's head indices in ``layer``, ascending (empty if the layer holds none)."""
        return [head for pair_layer, head in self.pairs if pair_layer == layer]

    def layer_widths(self, head_dim: int) -> dict[int, int]:
        """Coordinates of each layer's released vector: ``k_l · d`` (its heads times ``head_dim``)."""
        return {layer: len(self.heads_in(layer)) * head_dim for layer in self.layers}

    def check(self, geometry: HeadGeometry) -> HeadSet:
        """This set, after checking every pair exists in a model of ``geometry`` (else ``HeadSpecError``)."""
        for layer, head in self.pairs:
            _check_layer(layer, geometry)
            if not 0 <= head < geometry.num_heads:
                raise HeadSpecError(
                    f"head {head} of layer {layer} does not exist: the model has heads "
                    f"0..{geometry.num_heads - 1} per layer"
                )
        return self

    def in_words(self) -> str:
        """``'1 head in 1 layer'``, ``'32 heads in 4 layers'``: the count a summary shows."""
        heads, layers = len(self.pairs), len(self.layers)
        return f"{heads} head{'s' * (heads != 1)} in {layers} layer{'s' * (layers != 1)}"

    def to_json(self) -> list[list[int]]:
        """The pairs as ``[[layer, head], ...]``, the form head files and the artifact store."""
        return [list(pair) for pair in self.pairs]


def parse_head_spec(spec: str, geometry: HeadGeometry) -> HeadSet:
    """The head set a ``--heads`` spec names, checked against the model's ``geometry``.

    ``spec`` is ``all``, ``layers:A-B[,C]`` (every head of those layers, ranges inclusive),
    ``heads:L.H[,L.H]`` or the path of a JSON file (a list of ``[layer, head]`` pairs, or an object
    with a ``heads`` key such as ``dpmtv select`` writes). A layer or head the model lacks, or a
    spec that is none of these, raises ``HeadSpecError`` naming it. Example::

        loaded = dpmtv.load_model("my-vlm")
        heads = dpmtv.parse_head_spec("layers:8-15", loaded.adapter.geometry)
        heads = dpmtv.parse_head_spec("heads:3.1,10.0", loaded.adapter.geometry)
        heads.pairs  # ((3, 1), (10, 0))

    ``dpmtv.models.loading.read_head_geometry(path)`` gives the geometry from a checkpoint's
    config alone, without loading weights.
    """
    spec = spec.strip()
    if spec == "all":
        return HeadSet.of(
            (layer, head) for layer in range(geometry.num_layers) for head in range(geometry.num_heads)
        )
    if spec.startswith("layers:"):
        layers = _parse_layer_list(spec[len("layers:") :], spec, geometry)
        return HeadSet.of((layer, head) for layer in layers for head in range(geometry.num_heads))
    if spec.startswith("heads:"):
        return HeadSet.of(_parse_pair(item, spec) for item in spec[len("heads:") :].split(",")).check(
            geometry
        )
    path = Path(spec)
    if path.is_file():
        return _from_file(path).check(geometry)
    raise HeadSpecError(
        f"--heads '{spec}' is not understood: use 'all', 'layers:A-B[,C]', "
        "'heads:L.H[,L.H]' or the path of a JSON file of [layer, head] pairs"
    )


def _parse_layer_list(text: str, spec: str, geometry: HeadGeometry) -> list[int]:
    """Layer numbers and inclusive ranges, each bound checked against the model before any
    range is expanded (so ``layers:0-100000000`` is refused at once)."""
    values: list[int] = []
    for item in text.split(","):
        try:
            start, end = (int(part) for part in item.split("-", 1)) if "-" in item else (int(item),) * 2
        except ValueError:
            raise HeadSpecError(f"--heads '{spec}': '{item}' is not a layer number or range A-B") from None
        if end < start:
            raise HeadSpecError(f"--heads '{spec}': '{item}' is an empty range; write A-B with A <= B")
        for bound in (start, end):
            _check_layer(bound, geometry)
        values.extend(range(start, end + 1))
    return values


def _check_layer(layer: int, geometry: HeadGeometry) -> None:
    if not 0 <= layer < geometry.num_layers:
        last = geometry.num_layers - 1
        raise HeadSpecError(f"layer {layer} does not exist: the model has layers 0..{last}")


def _parse_pair(item: str, spec: str) -> tuple[int, int]:
    try:
        layer, head = item.strip().split(".")
        return int(layer), int(head)
    except ValueError:
        raise HeadSpecError(f"--heads '{spec}': '{item}' is not layer.head (e.g. 3.5)") from None


def _from_file(path: Path) -> HeadSet:
    try:
        content = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise HeadSpecError(f"head file '{path}' is not readable JSON: {exc}") from None
    pairs = content.get("heads") if isinstance(content, dict) else content
    if not isinstance(pairs, list):
        raise HeadSpecError(f"head file '{path}' must hold a list of [layer, head] pairs")
    for index, pair in enumerate(pairs):
        if not (isinstance(pair, list) and len(pair) == 2 and all(_is_int(value) for value in pair)):
            raise HeadSpecError(
                f"head file '{path}': entry {index} ({json.dumps(pair)}) is not a pair of integers "
                "[layer, head]"
            )
    return HeadSet.of((layer, head) for layer, head in pairs)


def _is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)
