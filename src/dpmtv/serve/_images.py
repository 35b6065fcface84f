"""Images arrive inline as ``data:`` URLs; the server fetches nothing from the network.

Only the formats the API documents are decoded, chosen from the bytes' signature and opened with
that one PIL plugin (``Image.open(formats=...)``): no other plugin ever sees client bytes (PIL's
EPS plugin runs Ghostscript). The size comes from the header before any pixel is decoded, and a
large image is decoded straight to a smaller size where the format allows (JPEG's DCT scaling)
and then reduced to what the processor works at, so a request holds few pixels for long.
"""

from __future__ import annotations

import base64
import binascii
import io
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import cast

from PIL import Image, UnidentifiedImageError

from dpmtv.serve._errors import ApiError

ACCEPTED_FORMATS = "PNG, JPEG, WebP, GIF"


def image_format(data: bytes) -> str | None:
    """The PIL format named by the file signature, or None for anything else."""
    if data.startswith(b"\x89PNG\r\n\x1a\n"):
        return "PNG"
    if data.startswith(b"\xff\xd8\xff"):
        return "JPEG"
    if data[:6] in (b"GIF87a", b"GIF89a"):
        return "GIF"
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "WEBP"
    return None


@dataclass(frozen=True)
class EncodedImage:
    """An image whose header was read: its bytes, format and declared size, nothing decoded."""

    data: bytes
    format: str
    width: int
    height: int
    param: str

    @property
    def pixels(self) -> int:
        return self.width * self.height


def encoded_image(url: str, *, max_pixels: int, param: str) -> EncodedImage:
    """Decode the base64 of ``data:image/...;base64,...`` and read the image's header."""
    data = _data_url_bytes(url, param)
    kind = image_format(data)
    if kind is None:
        raise ApiError(
            400,
            f"image data is not a {ACCEPTED_FORMATS} file ({len(data)} bytes; the format is read from the "
            "bytes, not the data: URL's type)",
            code="unsupported_image_format",
            param=param,
        )
    try:
        with _quiet(), Image.open(io.BytesIO(data), formats=[kind]) as image:
            width, height = image.size
    except Image.DecompressionBombError:
        limit = 2 * cast(int, Image.MAX_IMAGE_PIXELS)  # set: PIL checks only against a limit
        what = f"a {kind} image above PIL's {limit} pixels"
        raise _too_large(what, max_pixels, param) from None
    except (UnidentifiedImageError, OSError, ValueError, SyntaxError):
        raise _unreadable(kind, len(data), param) from None
    if width * height > max_pixels:
        raise _too_large(f"{width}×{height} = {width * height} pixels", max_pixels, param)
    return EncodedImage(data, kind, width, height, param)


def decode_image(encoded: EncodedImage, *, min_side: int) -> Image.Image:
    """The RGB pixels, reduced so that the shorter side keeps at least ``min_side`` pixels."""
    scale = min(1.0, min_side / min(encoded.width, encoded.height))
    target = (max(1, round(encoded.width * scale)), max(1, round(encoded.height * scale)))
    try:
        with _quiet(), Image.open(io.BytesIO(encoded.data), formats=[encoded.format]) as image:
            if scale < 1.0 and encoded.format == "JPEG":
                image.draft("RGB", target)  # decodes at 1/2, 1/4 or 1/8 scale, never below target
            image.load()
            rgb = image.convert("RGB")
    except (UnidentifiedImageError, Image.DecompressionBombError, OSError, ValueError, SyntaxError):
        raise _unreadable(encoded.format, len(encoded.data), encoded.param) from None
    if rgb.size[0] > target[0]:
        rgb = rgb.resize(target, Image.Resampling.LANCZOS, reducing_gap=3.0)
    return rgb


def image_from_data_url(url: str, *, max_pixels: int, param: str, min_side: int = 1 << 30) -> Image.Image:
    """Header check and decode in one step (tests and callers without admission control)."""
    return decode_image(encoded_image(url, max_pixels=max_pixels, param=param), min_side=min_side)


@contextmanager
def _quiet() -> Iterator[None]:
    # Our own pixel limit, checked from the header, replaces PIL's warning.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", Image.DecompressionBombWarning)
        yield


def _data_url_bytes(url: str, param: str) -> bytes:
    if not url.startswith("data:"):
        scheme = url.split(":", 1)[0] if ":" in url else url[:20]
        raise ApiError(
            400,
            f"image_url must be a data: URL (base64-encoded image); got a '{scheme}' URL — this server "
            "fetches nothing from the network",
            code="unsupported_image_url",
            param=param,
        )
    header, sep, payload = url.partition(",")
    if not sep or not header.endswith(";base64"):
        raise ApiError(
            400,
            "image data: URL must be 'data:image/<type>;base64,<data>'",
            code="invalid_image",
            param=param,
        )
    try:
        return base64.b64decode(payload, validate=True)
    except (binascii.Error, ValueError):
        raise ApiError(
            400, "image data: URL holds invalid base64", code="invalid_image", param=param
        ) from None


def _too_large(what: str, max_pixels: int, param: str) -> ApiError:
    return ApiError(
        400,
        f"image_too_large: the image is {what}; the limit is {max_pixels} pixels (--max-image-pixels)",
        code="image_too_large",
        param=param,
    )


def _unreadable(kind: str, size: int, param: str) -> ApiError:
    return ApiError(
        400,
        f"image data is not a readable {kind} image ({size} bytes); accepted formats: {ACCEPTED_FORMATS}",
        code="invalid_image",
        param=param,
    )
