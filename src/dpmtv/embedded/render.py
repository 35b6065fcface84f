"""Rendering of the embedded world: one shape per 24x24 RGB image, vectorised over images."""

from __future__ import annotations

import numpy as np
from PIL import Image

from dpmtv.embedded.world import ATTRIBUTES, VALUES

IMAGE_SIZE = 24
_BASE_RGB = np.array([[215, 45, 45], [45, 185, 65], [55, 90, 225], [225, 210, 45]], dtype=np.float32)
_COLOUR_JITTER = 25.0
_NOISE_STD = 10.0
_SMALL_R = (3.0, 4.0)
_BIG_R = (6.0, 7.5)
_LEFT_MAX_X = 9.5  # left centers lie in [r, 9.5]; right centers mirror them (23 - x)


def sample_attributes(rng: np.random.Generator, n: int) -> np.ndarray:
    """``n`` uniformly drawn attribute codes, shape ``(n, 4)`` (colour, shape, size, position)."""
    return np.stack([rng.integers(0, len(VALUES[name]), n) for name in ATTRIBUTES], axis=1).astype(np.int64)


def render(codes: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Images for attribute codes ``(n, 4)``: a uint8 array ``(n, 24, 24, 3)``. Vectorised."""
    codes = np.asarray(codes, dtype=np.int64).reshape(-1, 4)
    n = len(codes)
    colour, shape, size, position = codes.T
    radius = np.where(size == 1, rng.uniform(*_BIG_R, n), rng.uniform(*_SMALL_R, n)).astype(np.float32)
    u = rng.uniform(0.0, 1.0, n).astype(np.float32)
    cx = radius + u * np.maximum(_LEFT_MAX_X - radius, 0.0)
    cx = np.where(position == 1, (IMAGE_SIZE - 1) - cx, cx)
    v = rng.uniform(0.0, 1.0, n).astype(np.float32)
    cy = radius + v * ((IMAGE_SIZE - 1) - 2 * radius)

    grid = np.arange(IMAGE_SIZE, dtype=np.float32)
    dx = grid[None, None, :] - cx[:, None, None]
    dy = grid[None, :, None] - cy[:, None, None]
    r = radius[:, None, None]
    adx, ady = np.abs(dx), np.abs(dy)
    masks = np.stack(
        [
            np.maximum(adx, ady) <= 0.85 * r,  # square
            dx * dx + dy * dy <= r * r,  # circle
            (dy >= -r) & (dy <= r) & (adx <= 0.5 * (dy + r) + 0.3),  # triangle, apex up
            ((adx <= 0.35 * r) & (ady <= r)) | ((ady <= 0.35 * r) & (adx <= r)),  # cross
        ],
        axis=1,
    )
    mask = masks[np.arange(n), shape]  # (n, 24, 24)

    rgb = _BASE_RGB[colour] + rng.uniform(-_COLOUR_JITTER, _COLOUR_JITTER, (n, 3))
    background = rng.uniform(0.0, 70.0, (n, 1, 1, 1)).astype(np.float32)
    image = np.where(mask[..., None], rgb[:, None, None, :].astype(np.float32), background)
    image = image + rng.normal(0.0, _NOISE_STD, image.shape).astype(np.float32)
    return np.clip(np.rint(image), 0, 255).astype(np.uint8)


def to_pil(images: np.ndarray) -> list[Image.Image]:
    return [Image.fromarray(np.ascontiguousarray(im), mode="RGB") for im in images]
