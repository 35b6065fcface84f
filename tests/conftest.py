from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from dpmtv.models.loading import load_model
from dpmtv.testing import build_tiny_checkpoint


@pytest.fixture(scope="session")
def tiny_checkpoint(tmp_path_factory) -> Callable[..., Path]:
    """``tiny_checkpoint(family, seed=0)``: a tiny random-weight checkpoint folder, built once per
    session for each family and seed and shared by every test that asks (tests only read it)."""
    built: dict[tuple[str, int], Path] = {}

    def build(family: str, *, seed: int = 0) -> Path:
        if (family, seed) not in built:
            folder = tmp_path_factory.mktemp(f"tiny-{family}-seed{seed}")
            built[family, seed] = build_tiny_checkpoint(family, folder, seed=seed)
        return built[family, seed]

    return build


@pytest.fixture(scope="session")
def tiny_llava_path(tiny_checkpoint) -> Path:
    return tiny_checkpoint("llava")


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


# Folders, modules and tests in the slow set (``pytest -m "not slow"`` is the fast subset, see
# CONTRIBUTING.md): each starts processes, a browser or a cluster, or runs many builds. Chosen from
# the full suite's --durations on main (2,810 s under load: these took about three quarters of it);
# single slow tests elsewhere carry ``@pytest.mark.slow`` themselves.
SLOW_PATHS = {
    "distributed/": "a local Ray cluster, its actors and raylets",
    "demo/": "runs of dpmtv demo (builds, evals and reports)",
    "audit/test_sensitivity_rounds.py": "audits of private rounds: many builds per test (~650 s)",
    "audit/test_membership.py": "membership-inference attacks over many builds",
    "serve/test_page.py": "the web page in a headless browser (~240 s to start)",
    "pipeline/test_build_reveals_no_n.py": "builds in real processes at several N",
    "embedded/test_embedded_training.py": "steps of the embedded model's training script",
    "eval/test_eval_end_to_end.py": "dpmtv eval end to end",
    "cli/test_startup.py::test_inspect_plan_and_budget_import_no_model_stack": "fresh interpreters",
    "artifact/test_artifact_metadata.py::test_metadata_of_a_choice_on_the_release": "two release builds",
    "serve/test_lmms_eval.py": "lmms-eval end to end against a live server",
    "pipeline/test_build_shows_no_duration.py::test_a_private_stage": "builds in real processes at two N",
    "cli/test_cli.py::test_demo_quick": "a run of dpmtv demo --quick",
}
TESTS = Path(__file__).resolve().parent


def pytest_collection_modifyitems(config, items) -> None:
    for item in items:
        where = Path(str(item.fspath)).resolve().relative_to(TESTS).as_posix() + "::" + item.name
        if any(where.startswith(path) for path in SLOW_PATHS):
            item.add_marker(pytest.mark.slow)
