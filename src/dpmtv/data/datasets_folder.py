"""Rows of a Hugging Face ``datasets`` folder (``save_to_disk``) with their images left undecoded.

A decoded dataset holds every image as pixels from the moment it is read (400 images of 512×512:
+411 MB). Here the folder's image columns are cast to ``Image(decode=False)`` and each image
cell becomes a :class:`DatasetImage`: the split's folder, the row, the column and the position
in a list cell. The bytes are read from the memory-mapped Arrow file, and decoded, only when a
chunk is prepared (and once, transiently, when the records are validated), so memory does not
grow with the number of images. A handle pickles as its four fields and reopens the folder in the
process that reads it (a Ray actor or a prepare worker), as a path record reopens its file.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dpmtv.errors import RecordError

__all__ = ["DatasetImage", "undecoded_rows"]


@dataclass(frozen=True)
class DatasetImage:
    """One image of a saved ``datasets`` split, read on demand."""

    folder: str  # the split's own folder
    row: int
    column: str
    position: int | None = None  # index in a list-of-images cell; None for a single-image cell

    def read(self) -> bytes | Path:
        """The encoded image: its bytes, or the file the dataset points to."""
        cell = _open_undecoded(self.folder)[self.row][self.column]
        value = cell if self.position is None else cell[self.position]
        if value.get("bytes"):
            return bytes(value["bytes"])
        if value.get("path"):
            return Path(value["path"])
        raise RecordError(f"{self.folder}[{self.row}]: field '{self.column}' holds an empty image")


def undecoded_rows(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    """``(index, row)`` of the folder's one split, image cells replaced by :class:`DatasetImage`."""
    folder = _split_folder(path)
    dataset = _open_undecoded(str(folder))
    image_columns = {name: _is_list(feature) for name, feature in _image_features(dataset.features).items()}
    others = [name for name in dataset.column_names if name not in image_columns]
    rows = iter(dataset.select_columns(others)) if others else ({} for _ in range(len(dataset)))
    lengths = {name: _list_lengths(dataset, name) for name, is_list in image_columns.items() if is_list}
    for index, text in enumerate(rows):
        row = dict(text)
        for name, is_list in image_columns.items():
            if is_list:
                row[name] = [DatasetImage(str(folder), index, name, k) for k in range(lengths[name][index])]
            else:
                row[name] = DatasetImage(str(folder), index, name)
        yield index, row


def _split_folder(path: Path) -> Path:
    """The folder itself, or the one split of a saved ``DatasetDict``."""
    import datasets

    try:
        loaded = datasets.load_from_disk(str(path))
    except (FileNotFoundError, ValueError) as exc:
        raise RecordError(f"'{path}' is not a dataset saved with save_to_disk: {exc}") from None
    if not isinstance(loaded, datasets.DatasetDict):
        return path
    if len(loaded) != 1:
        splits = ", ".join(loaded)
        raise RecordError(f"'{path}' holds {len(loaded)} splits ({splits}); point at one split's folder")
    return path / str(next(iter(loaded)))


@functools.lru_cache(maxsize=8)
def _open_undecoded(folder: str) -> Any:
    """The split, memory-mapped, with every image feature cast to ``decode=False`` (once per
    process and folder)."""
    import datasets

    dataset = datasets.load_from_disk(folder)
    for name, feature in _image_features(dataset.features).items():
        dataset = dataset.cast_column(name, _undecoded(feature))
    return dataset


def _image_features(features: Any) -> dict[str, Any]:
    """Columns holding an image, or a list of images."""
    import datasets

    found = {}
    for name, feature in features.items():
        inner = getattr(feature, "feature", None) if _is_list(feature) else feature
        if isinstance(inner, datasets.Image):
            found[name] = feature
    return found


def _is_list(feature: Any) -> bool:
    import datasets

    return isinstance(feature, (datasets.Sequence, getattr(datasets, "List", datasets.Sequence), list))


def _undecoded(feature: Any) -> Any:
    import datasets

    if isinstance(feature, datasets.Image):
        return datasets.Image(decode=False)
    if isinstance(feature, list):
        return [datasets.Image(decode=False)]
    return type(feature)(datasets.Image(decode=False))


def _list_lengths(dataset: Any, column: str) -> list[int]:
    """Images per row of a list column, from the Arrow offsets (no image bytes are read)."""
    import pyarrow.compute as pc

    return [count or 0 for count in pc.list_value_length(dataset.data.column(column)).to_pylist()]
