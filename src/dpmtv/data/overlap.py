"""Public data must not be private data: refuse public build inputs that repeat private records.

A build uses some inputs WITHOUT noise because they are public: the records of
``--heads-from public:FILE`` (public head selection) and ``--center FILE`` (the centering
reference), and a public ``--query`` image. If one of them is in fact a private record, the
artifact depends on that record through an un-noised path, and the (ε, δ) guarantee does not
hold for it. So before any forward pass the build compares fingerprints and refuses an overlap,
with its count.

Fingerprints are SHA-256 digests. A record's covers its images, question and answer; an image's
covers its DECODED pixels (mode, size, bytes after conversion to RGB), not the file bytes, so the
same picture saved again (another PNG compression level, other metadata, another file name) is
still caught. This finds exact copies only: a re-compressed JPEG or a cropped image is a
different image to it.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

from PIL import Image

from dpmtv.data.records import Record, load_records
from dpmtv.errors import RecordError

__all__ = ["check_public_inputs", "image_fingerprint", "record_fingerprint"]


def image_fingerprint(image: Image.Image) -> str:
    """SHA-256 of an image's decoded RGB pixels and size."""
    rgb = image.convert("RGB")
    digest = hashlib.sha256(f"{rgb.mode}|{rgb.size[0]}x{rgb.size[1]}|".encode())
    digest.update(rgb.tobytes())
    return digest.hexdigest()


def record_fingerprint(record: Record) -> str:
    """SHA-256 over a record's image fingerprints, question and answer (length-prefixed)."""
    digest = hashlib.sha256()
    parts = [*(image_fingerprint(image) for image in record.load_images()), record.question, record.answer]
    for part in parts:
        encoded = part.encode("utf-8")
        digest.update(len(encoded).to_bytes(8, "little") + encoded)
    return digest.hexdigest()


def check_public_inputs(
    private: Sequence[Record],
    *,
    public_records: Mapping[str, str | Path] | None = None,
    public_images: Mapping[str, str | Path] | None = None,
) -> None:
    """Refuse public inputs that are private records.

    ``public_records`` maps an option name (for the message, e.g. ``"--center"``) to a public
    records file; ``public_images`` maps an option name to a public image file.

    Raises:
        RecordError: a public record equal to a private one (same images, question and answer),
            or a public image that is the image of a private record; the message names the
            option, the file and how many.
    """
    public_records, public_images = dict(public_records or {}), dict(public_images or {})
    if not public_records and not public_images:
        return
    if public_records:
        private_records = {record_fingerprint(record) for record in private}
        for option, path in public_records.items():
            _refuse_records(option, path, private_records)
    if public_images:
        private_images = [{image_fingerprint(i) for i in record.load_images()} for record in private]
        for option, path in public_images.items():
            _refuse_image(option, path, private_images)


def _refuse_records(option: str, path: str | Path, private: set[str]) -> None:
    public = load_records(path)
    shared = sum(record_fingerprint(record) in private for record in public)
    if shared:
        raise RecordError(
            f"{option} '{path}': {shared} of the {len(public)} public records are also private "
            "records (same images, question and answer). Public inputs are used without noise, "
            "so they must not contain private data: remove those records from the public file"
        )


def _refuse_image(option: str, path: str | Path, private: Iterable[set[str]]) -> None:
    try:
        with Image.open(path) as image:
            fingerprint = image_fingerprint(image)
    except (OSError, SyntaxError) as exc:
        raise RecordError(f"{option} '{path}' is not a readable image ({exc})") from None
    shared = sum(fingerprint in images for images in private)
    if shared:
        noun = "record" if shared == 1 else "records"
        raise RecordError(
            f"{option} '{path}' is the image of {shared} private {noun}. A public query is used "
            "without noise, so it must not be private data: use another image or --query blank"
        )
