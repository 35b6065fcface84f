"""Records: one private demonstration = image(s) + question + answer (+ optional id, user id).

Loaders read JSONL, CSV (same field names) and Hugging Face ``datasets`` saved on disk, and
validate everything up front: a missing field, an unreadable image (a missing file, a header no
format reads, a checksum that fails) or an empty set fails with one message naming the file, the
record and the field. Images are not decoded here: each is decoded once, where it is used.

Field rules (the same for every format):

* ``question`` and ``answer`` are text. An integer is taken as its decimal text (``3`` → "3");
  booleans, non-integer numbers (and NaN) and anything else are refused, since "True" or "nan"
  would silently become a demonstration's answer. Quote such answers in the file.
* ``image`` is a path relative to the file, or a list of them. In a CSV cell, several images are
  separated by ``;`` or, for paths that contain ``;``, written as a JSON list
  (``["img/a;b.png", "img/c.png"]``).
* CSV files may start with a byte-order mark (as spreadsheet programs save them).
* Images larger than ``DPMTV_MAX_IMAGE_PIXELS`` (default: Pillow's, about 179 Mpx) are
  refused as possible decompression bombs; raise the variable to accept them.
"""

from __future__ import annotations

import contextlib
import csv
import io
import json
import os
import warnings
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Union

from PIL import Image, UnidentifiedImageError

from dpmtv._atomic import replacing
from dpmtv.data.datasets_folder import DatasetImage, undecoded_rows
from dpmtv.errors import RecordError

MAX_IMAGE_PIXELS_VARIABLE = "DPMTV_MAX_IMAGE_PIXELS"
ImageSource = Union[Path, bytes, Image.Image, DatasetImage]  # noqa: UP007 (a runtime alias)
REQUIRED_FIELDS = ("image", "question", "answer")


@dataclass(frozen=True)
class Record:
    """One demonstration. ``where`` says where it came from (``file:line``) for error messages."""

    record_id: str
    images: tuple[ImageSource, ...]
    question: str
    answer: str
    user_id: str | None = None
    where: str = ""
    has_explicit_id: bool = False

    def load_images(self) -> tuple[Image.Image, ...]:
        """The images decoded, in RGB; an unreadable one raises RecordError (file:line, field)."""
        return tuple(_open_image(source, self.where, index) for index, source in enumerate(self.images))

    def image_sizes(self) -> tuple[tuple[int, int], ...]:
        """Each image's (width, height) from its header, the file's checksums verified where the
        format has them, no pixel decoded: the cheap check of the loaders and of the build's
        validation pass. Raises RecordError as :meth:`load_images` does; an image whose pixel data
        is damaged behind valid checksums fails only when decoded."""
        return tuple(_image_size(source, self.where, index) for index, source in enumerate(self.images))


def load_records(path: str | Path, *, require_answer: bool = True) -> list[Record]:
    """Read and validate records from a ``.jsonl``/``.csv`` file or a saved ``datasets`` folder.

    ``require_answer=False`` reads queries, whose answer field may be absent.
    """
    path = Path(path)
    if not path.exists():
        raise RecordError(f"data file '{path}' does not exist")
    if path.is_dir():
        records = _from_datasets(path, require_answer)
    elif path.suffix.lower() == ".jsonl":
        records = list(_from_jsonl(path, require_answer))
    elif path.suffix.lower() == ".csv":
        records = list(_from_csv(path, require_answer))
    else:
        raise RecordError(
            f"'{path}': unknown data format '{path.suffix}'; use .jsonl, .csv or a folder "
            "written by datasets' save_to_disk"
        )
    return validate_records(records, source=str(path))


def validate_records(records: list[Record], *, source: str) -> list[Record]:
    """Check every record's images are readable (:meth:`Record.image_sizes`: headers and
    checksums, not decoded: the images are decoded once, where they are used) and ids are unique;
    refuse an empty set."""
    if not records:
        raise RecordError(f"'{source}' contains no records")
    seen: dict[str, str] = {}
    for record in records:
        if record.has_explicit_id and record.record_id in seen:
            raise RecordError(
                f"{record.where}: field 'id' = '{record.record_id}' repeats the id of "
                f"{seen[record.record_id]}; record ids must be unique"
            )
        seen[record.record_id] = record.where
        record.image_sizes()
    return records


def _from_jsonl(path: Path, require_answer: bool) -> Iterable[Record]:
    with path.open("rb") as handle:
        for line_number, raw in enumerate(handle, start=1):
            where = f"{path}:{line_number}"
            try:
                line = raw.decode("utf-8-sig" if line_number == 1 else "utf-8")
            except UnicodeDecodeError as exc:
                raise RecordError(
                    f"{where}: not valid UTF-8 (byte 0x{raw[exc.start]:02x} at column {exc.start + 1}); "
                    "save the file as UTF-8"
                ) from None
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as exc:
                raise RecordError(f"{where}: not valid JSON ({exc.msg})") from None
            if not isinstance(row, dict):
                raise RecordError(f"{where}: expected a JSON object, got {type(row).__name__}")
            yield _record_from_row(row, where, path.parent, f"line-{line_number}", require_answer)


def _from_csv(path: Path, require_answer: bool) -> Iterable[Record]:
    try:
        with path.open(encoding="utf-8-sig", newline="") as handle:  # -sig: spreadsheets write a BOM
            for line_number, row in enumerate(csv.DictReader(handle), start=2):
                row = {key: value for key, value in row.items() if value not in (None, "")}
                where = f"{path}:{line_number}"
                if "image" in row:
                    row["image"] = _csv_image_cell(row["image"], where)
                yield _record_from_row(row, where, path.parent, f"line-{line_number}", require_answer)
    except UnicodeDecodeError as exc:
        raise RecordError(f"'{path}': not valid UTF-8 ({exc.reason}); save the file as UTF-8") from None


def _csv_image_cell(cell: str, where: str) -> list[str]:
    """``a.png;b.png`` or a JSON list (for paths that contain ``;``)."""
    if cell.lstrip().startswith("["):
        try:
            paths = json.loads(cell)
        except json.JSONDecodeError as exc:
            raise RecordError(f"{where}: field 'image' is not a valid JSON list ({exc.msg})") from None
        if not isinstance(paths, list) or not all(isinstance(item, str) for item in paths):
            raise RecordError(f"{where}: field 'image' must be a JSON list of paths")
        return paths
    return [part.strip() for part in cell.split(";") if part.strip()]


def _from_datasets(path: Path, require_answer: bool) -> list[Record]:
    """Rows with undecoded image handles: pixels are read when a chunk is prepared."""
    return [
        _record_from_row(row, f"{path}[{index}]", path, f"row-{index}", require_answer)
        for index, row in undecoded_rows(path)
    ]


def _record_from_row(
    row: dict[str, Any], where: str, base: Path, default_id: str, require_answer: bool = True
) -> Record:
    required = REQUIRED_FIELDS if require_answer else ("image", "question")
    missing = [name for name in required if row.get(name) in (None, "", [])]
    if missing:
        raise RecordError(f"{where}: missing field '{missing[0]}'")
    row.setdefault("answer", "")
    images = row["image"] if isinstance(row["image"], list) else [row["image"]]
    return Record(
        record_id=str(row["id"]) if row.get("id") not in (None, "") else default_id,
        images=tuple(_image_source(value, where, base) for value in images),
        question=_text_field(row, "question", where),
        answer=_text_field(row, "answer", where),
        user_id=None if row.get("user_id") in (None, "") else str(row["user_id"]),
        where=where,
        has_explicit_id=row.get("id") not in (None, ""),
    )


def _text_field(row: dict[str, Any], name: str, where: str) -> str:
    value = row[name]
    if isinstance(value, str):
        return value
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    raise RecordError(
        f"{where}: field '{name}' must be text, got {type(value).__name__} {value!r}; "
        "write it as a quoted string"
    )


def _image_source(value: Any, where: str, base: Path) -> ImageSource:
    if isinstance(value, (Image.Image, DatasetImage)):
        return value
    if isinstance(value, (bytes, bytearray)):
        return bytes(value)
    if isinstance(value, dict) and value.get("bytes"):  # datasets' undecoded Image feature
        return bytes(value["bytes"])
    if isinstance(value, str):
        try:
            return (base / value).resolve()
        except (OSError, RuntimeError) as exc:  # RuntimeError: a symlink loop (Python < 3.13)
            raise RecordError(f"{where}: field 'image': path '{value}' cannot be resolved ({exc})") from None
    raise RecordError(f"{where}: field 'image' must be a path, bytes or an image, got {type(value).__name__}")


def _open_image(source: ImageSource, where: str, index: int) -> Image.Image:
    if isinstance(source, Image.Image):
        return source.convert("RGB")
    with _readable(source, where, index) as image:
        return image.convert("RGB")


def _image_size(source: ImageSource, where: str, index: int) -> tuple[int, int]:
    """(width, height) from the header; ``verify`` reads the rest of the file and checks its
    checksums where the format has them (PNG's per-chunk CRCs) without decoding any pixel."""
    if isinstance(source, Image.Image):
        return source.size
    with _readable(source, where, index) as image:
        size = image.size
        image.verify()
    return size


@contextlib.contextmanager
def _readable(source: Path | bytes | DatasetImage, where: str, index: int) -> Iterator[Image.Image]:
    """The opened image (header read, pixels not yet decoded); any failure inside the block, the
    open's or the caller's decode, becomes one RecordError naming the record, field and file."""
    field = "image" if index == 0 else f"image[{index}]"
    if isinstance(source, DatasetImage):
        source = source.read()
    name = f"file '{source}'" if isinstance(source, Path) else "inline bytes"
    if isinstance(source, Path) and not source.exists():
        raise RecordError(f"{where}: field '{field}': file '{source}' does not exist")
    try:
        with _pixel_limit(), Image.open(io.BytesIO(source) if isinstance(source, bytes) else source) as image:
            yield image
    except Image.DecompressionBombError as exc:
        raise RecordError(
            f"{where}: field '{field}': {name} is refused as a possible decompression bomb ({exc}); "
            f"set {MAX_IMAGE_PIXELS_VARIABLE} to a larger pixel count to accept it"
        ) from None
    except (UnidentifiedImageError, OSError, SyntaxError) as exc:
        raise RecordError(f"{where}: field '{field}': {name} is not a readable image ({exc})") from None


@contextlib.contextmanager
def _pixel_limit() -> Iterator[None]:
    """Pillow's decompression-bomb limit, raised (or lowered) by ``DPMTV_MAX_IMAGE_PIXELS``; an
    image over twice the limit raises, so the limit given is applied as Pillow's half-limit."""
    value = os.environ.get(MAX_IMAGE_PIXELS_VARIABLE)
    if value is None:
        yield
        return
    try:
        limit = int(value)
    except ValueError:
        raise RecordError(f"{MAX_IMAGE_PIXELS_VARIABLE}={value!r} is not a whole number of pixels") from None
    saved = Image.MAX_IMAGE_PIXELS
    Image.MAX_IMAGE_PIXELS = max(1, limit // 2)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", Image.DecompressionBombWarning)
            yield
    finally:
        Image.MAX_IMAGE_PIXELS = saved


def write_jsonl(records: Iterable[dict[str, Any]], path: str | Path) -> Path:
    """Write rows as JSONL (used by the demo and tests to produce record files)."""
    path = Path(path)
    with replacing(path) as temporary, open(temporary, "w", encoding="utf-8") as handle:
        for row in records:
            handle.write(json.dumps(row) + "\n")
    return path
