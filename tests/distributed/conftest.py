from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def ray_cluster():
    """One real local Ray cluster for the session (~30 s to start on 2 cores). Workers inherit
    PYTHONPATH, so they import this checkout's dpmtv and the tests' worker subclasses."""
    ray = pytest.importorskip("ray")
    paths = [str(REPO / "src"), str(REPO), os.environ.get("PYTHONPATH", "")]
    previous = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in paths if p)
    ray.init(num_cpus=2, include_dashboard=False, logging_level="WARNING")
    yield ray
    ray.shutdown()
    if previous is None:
        os.environ.pop("PYTHONPATH", None)
    else:
        os.environ["PYTHONPATH"] = previous
