"""User-level builds on the real build path: one user's records move the release by at most Δ.

The coupling of the sensitivity proof (``dpmtv.privacy.user_level``) is realised by seeding: two
builds with the same ``insecure_seed`` draw the same partition key, so they differ only by what
the data changed. A non-private (un-noised) build then shows the mean itself, and
``‖mean(D) − mean(D')‖`` must stay within the artifact's own ``l2_sensitivity``.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from dpmtv.data import load_records
from dpmtv.heads import parse_head_spec
from dpmtv.pipeline.build import BuildSettings, build_task_vector

HEAVY_USER = "heavy"


def write_user_records(folder: Path, *, heavy_seed: int, heavy_records: int = 24, others: int = 8) -> Path:
    """``others`` users with 2 records each and one heavy user with ``heavy_records`` records.

    The other users' records are the same for every ``heavy_seed``; only the heavy user's images,
    questions and answers depend on it.
    """
    (folder / "img").mkdir(parents=True, exist_ok=True)
    rows = []

    def add(name: str, user: str, pixels: np.ndarray, question: str, answer: str) -> None:
        Image.fromarray(pixels).save(folder / "img" / f"{name}.png")
        rows.append(
            {"id": name, "user_id": user, "image": f"img/{name}.png", "question": question, "answer": answer}
        )

    rng = np.random.default_rng(0)
    for user in range(others):
        for index in range(2):
            add(
                f"u{user}-{index}",
                f"user-{user}",
                rng.integers(0, 256, (20, 20, 3), dtype=np.uint8),
                "What is shown?",
                f"thing {index}",
            )
    heavy = np.random.default_rng(1000 + heavy_seed)
    for index in range(heavy_records):
        add(
            f"h-{index}",
            HEAVY_USER,
            heavy.integers(0, 256, (20, 20, 3), dtype=np.uint8),
            f"Question {heavy_seed}-{index}?",
            f"answer {heavy_seed} {index}",
        )
    rng_order = np.random.default_rng(5)  # interleave users in the file
    rows = [rows[i] for i in rng_order.permutation(len(rows))]
    path = folder / "records.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def _unnoised_user_level(tiny_llava, path: Path, *, seed: int):
    settings = BuildSettings(
        epsilon=1.0,
        delta=1e-5,
        l2_clip_norm=(1e-3,),  # every chunk vector is clipped: its direction is all that moves
        shots_per_chunk=4,
        num_chunks=16,
        privacy_unit="user",
        max_records_per_user=2,
        non_private=True,  # the un-noised mean, so the data's own movement is visible
        insecure_seed=seed,
        allow_insecure_seed=True,
        progress=False,
    )
    heads = parse_head_spec("layers:0-1", tiny_llava.adapter.geometry)
    return build_task_vector(tiny_llava, load_records(path), heads, settings).vector


@pytest.mark.parametrize("seed", [0, 1])
def test_changing_one_users_records_moves_the_release_by_at_most_its_sensitivity(tiny_llava, tmp_path, seed):
    original = _unnoised_user_level(tiny_llava, write_user_records(tmp_path / "a", heavy_seed=0), seed=seed)
    changed = _unnoised_user_level(tiny_llava, write_user_records(tmp_path / "b", heavy_seed=1), seed=seed)
    removed = _unnoised_user_level(
        tiny_llava, write_user_records(tmp_path / "c", heavy_seed=0, heavy_records=0), seed=seed
    )
    sensitivity = original.metadata.privacy.l2_sensitivity
    assert sensitivity == pytest.approx(2 * 1e-3 * np.sqrt(2) / 16)
    for neighbour in (changed, removed):
        assert neighbour.metadata.privacy.l2_sensitivity == sensitivity
        moved = float(np.linalg.norm(original.values.astype(np.float64) - neighbour.values))
        assert moved <= sensitivity * (1 + 1e-5), f"moved {moved / sensitivity:.2f} × Δ"


def test_seeded_user_level_builds_on_the_same_data_are_identical(tiny_llava, tmp_path):
    path = write_user_records(tmp_path / "a", heavy_seed=0)
    first = _unnoised_user_level(tiny_llava, path, seed=3)
    second = _unnoised_user_level(tiny_llava, path, seed=3)
    np.testing.assert_array_equal(first.values, second.values)
