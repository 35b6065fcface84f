"""Synthetic colour records for smoke tests and benchmarks of the pipeline's mechanics."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from PIL import Image

from dpmtv.data.records import write_jsonl

COLOURS = {"red": (220, 30, 30), "green": (30, 200, 30), "blue": (30, 30, 220), "yellow": (230, 230, 30)}
QUESTION = "What colour is the image?"


def write_colour_records(folder: Path, count: int, *, seed: int) -> Path:
    """``count`` records (a noisy solid-colour 20 px PNG, a question, the colour's name) as JSONL."""
    rng = np.random.default_rng(seed)
    (folder / "images").mkdir(parents=True, exist_ok=True)
    rows = []
    for index in range(count):
        name = list(COLOURS)[int(rng.integers(len(COLOURS)))]
        pixels = np.clip(np.array(COLOURS[name]) + rng.normal(0, 20, (20, 20, 3)), 0, 255).astype(np.uint8)
        Image.fromarray(pixels).save(folder / "images" / f"{index:05d}.png")
        rows.append(
            {"id": f"r{index}", "image": f"images/{index:05d}.png", "question": QUESTION, "answer": name}
        )
    return write_jsonl(rows, folder / "records.jsonl")
