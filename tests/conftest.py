from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from dpmtv.models.loading import load_model
from dpmtv.testing import build_tiny_checkpoint


@pytest.fixture(scope="session")
def tiny_llava_path(tmp_path_factory) -> Path:
    return build_tiny_checkpoint("llava", tmp_path_factory.mktemp("tiny-llava"))


# Tests run on the CPU; a GPU check sets DPMTV_TEST_DEVICE=cuda to run the same tests there.
TEST_DEVICE = os.environ.get("DPMTV_TEST_DEVICE", "cpu")
# the commands' --device defaults to auto (the GPU when there is one); the suite's commands run on
# TEST_DEVICE like its library calls, and tests of auto clear the variable
os.environ.setdefault("DPMTV_DEVICE", TEST_DEVICE)


@pytest.fixture(scope="session")
def tiny_llava(tiny_llava_path):
    return load_model(tiny_llava_path, device=TEST_DEVICE)


def write_records(folder: Path, count: int, *, seed: int = 0, with_ids: bool = True, **extra) -> Path:
    """Generated records (random 20 px images) as JSONL with images beside it."""
    rng = np.random.default_rng(seed)
    (folder / "img").mkdir(parents=True, exist_ok=True)
    rows = []
    for index in range(count):
        Image.fromarray(rng.integers(0, 256, (20, 20, 3), dtype=np.uint8)).save(
            folder / "img" / f"{index}.png"
        )
        row = {"image": f"img/{index}.png", "question": "What is shown?", "answer": f"thing {index % 3}"}
        if with_ids:
            row["id"] = f"rec-{index}"
        row.update(extra)
        rows.append(row)
    path = folder / "records.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


@pytest.fixture
def records_file(tmp_path) -> Path:
    return write_records(tmp_path / "data", 24)
