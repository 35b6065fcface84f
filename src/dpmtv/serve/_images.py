"""Images arrive inline as ``data:`` URLs; the server fetches nothing from the network."""

from __future__ import annotations

import base64
import binascii
import io
import warnings

from PIL import Image, UnidentifiedImageError

from dpmtv.serve._errors import ApiError


def image_from_data_url(url: str, *, max_pixels: int, param: str) -> Image.Image:
    """Decode ``data:image/...;base64,...`` into an RGB image, checking its size from the header
    before the pixels are decoded (a small file can declare a huge image)."""
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
        data = base64.b64decode(payload, validate=True)
    except (binascii.Error, ValueError):
        raise ApiError(
            400, "image data: URL holds invalid base64", code="invalid_image", param=param
        ) from None
    return _decoded(data, max_pixels=max_pixels, param=param)


def _decoded(data: bytes, *, max_pixels: int, param: str) -> Image.Image:
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", Image.DecompressionBombWarning)
            image = Image.open(io.BytesIO(data))
            width, height = image.size
            if width * height > max_pixels:
                raise ApiError(
                    400,
                    f"image is {width}×{height} = {width * height} pixels; the limit is {max_pixels} "
                    "(--max-image-pixels)",
                    code="image_too_large",
                    param=param,
                )
            image.load()
    except (UnidentifiedImageError, Image.DecompressionBombError, OSError, ValueError):
        raise ApiError(
            400, f"image data is not a readable image ({len(data)} bytes)", code="invalid_image", param=param
        ) from None
    return image.convert("RGB")
