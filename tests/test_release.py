"""The release a user installs: ``python -m build`` makes an sdist and a wheel that ``twine check``
accepts; the wheel holds no logs, stays under a stated size, and, installed alone into a fresh
virtual environment, runs ``dpmtv --version`` and a tiny build.

The fresh environment sees the test environment's packages (torch, transformers, ...) through a
``.pth`` file, so only dpmtv comes from the wheel (``--no-deps``); the test checks that the
``dpmtv`` it runs is the one installed there, not this source tree.
"""

from __future__ import annotations

import json
import os
import shutil
import site
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

import dpmtv
from dpmtv.testing import build_tiny_checkpoint
from tests.conftest import write_records

ROOT = Path(__file__).resolve().parent.parent
# the wheel measured 5.07 MB (5,070,992 bytes; the embedded checkpoint's weights are 4.8 MB of
# it); the bound leaves ~18 % for growth, and a stray log or dataset shows at once
MAX_WHEEL_BYTES = 6_000_000
SOURCES = ("src", "pyproject.toml", "README.md", "LICENSE")


def _run(*args: str | Path, **kwargs) -> subprocess.CompletedProcess:
    environment = {k: v for k, v in os.environ.items() if k != "PYTHONPATH" and not k.startswith("DPMTV_")}
    done = subprocess.run([str(a) for a in args], capture_output=True, text=True, env=environment, **kwargs)
    assert done.returncode == 0, f"{args}: {done.stdout}\n{done.stderr}"
    return done


@pytest.fixture(scope="module")
def dist(tmp_path_factory) -> Path:
    """An sdist and a wheel built from a copy of the source tree (the build writes egg-info)."""
    tree, out = tmp_path_factory.mktemp("tree"), tmp_path_factory.mktemp("dist")
    for name in SOURCES:
        source = ROOT / name
        if source.is_dir():
            ignored = shutil.ignore_patterns("__pycache__", "*.egg-info", "*.pyc")
            shutil.copytree(source, tree / name, ignore=ignored)
        else:
            shutil.copy2(source, tree / name)
    # offline: the build backend (setuptools) comes from this environment, not an isolated one
    _run(sys.executable, "-m", "build", "--no-isolation", "--outdir", out, tree, timeout=600)
    return out


@pytest.mark.slow
def test_the_sdist_and_wheel_pass_twine_check_and_the_wheel_holds_no_logs(dist):
    wheel, sdist = _only(dist, "*.whl"), _only(dist, "*.tar.gz")
    assert wheel.name == f"dpmtv-{dpmtv.__version__}-py3-none-any.whl"
    assert sdist.name == f"dpmtv-{dpmtv.__version__}.tar.gz"
    checked = _run(sys.executable, "-m", "twine", "check", "--strict", wheel, sdist, timeout=120)
    assert checked.stdout.count("PASSED") == 2, checked.stdout
    assert wheel.stat().st_size < MAX_WHEEL_BYTES, wheel.stat().st_size
    names = zipfile.ZipFile(wheel).namelist()
    assert not [name for name in names if name.endswith((".jsonl", ".log"))]
    assert "dpmtv/embedded/checkpoint/model.safetensors" in names and "dpmtv/py.typed" in names


@pytest.mark.slow
def test_the_wheel_installed_alone_runs_version_and_a_tiny_build(dist, tmp_path):
    venv = tmp_path / "venv"
    _run(sys.executable, "-m", "venv", "--system-site-packages", venv, timeout=300)
    python, purelib = venv / "bin" / "python", _purelib(venv)
    # the test environment's packages, after the fresh environment's own (which holds dpmtv)
    parents = [path for path in site.getsitepackages() if Path(path).is_dir()]
    (purelib / "_parent_env.pth").write_text("".join(f"{path}\n" for path in parents))
    _run(python, "-m", "pip", "install", "--no-deps", "--no-index", _only(dist, "*.whl"), timeout=300)

    where = _run(python, "-c", "import dpmtv; print(dpmtv.__file__)", cwd=tmp_path, timeout=120)
    assert Path(where.stdout.strip()).is_relative_to(venv) and not Path(where.stdout.strip()).is_relative_to(
        ROOT
    )
    version = _run(venv / "bin" / "dpmtv", "--version", cwd=tmp_path, timeout=120)
    assert dpmtv.__version__ in version.stdout

    model = build_tiny_checkpoint("llava", tmp_path / "model")
    records = write_records(tmp_path / "data", 12)
    out = tmp_path / "task.safetensors"
    build = ["build", "--model", model, "--data", records, "--heads", "layers:0", "--epsilon", "1"]
    build += ["--l2-clip-norm", "1", "--shots-per-chunk", "4", "--device", "cpu", "--out", out, "--quiet"]
    _run(venv / "bin" / "dpmtv", *build, cwd=tmp_path, timeout=600)
    inspected = _run(venv / "bin" / "dpmtv", "inspect", out, "--json", cwd=tmp_path, timeout=120)
    assert json.loads(inspected.stdout)["library_version"] == dpmtv.__version__


def _purelib(venv: Path) -> Path:
    found = list(venv.glob("lib/python3*/site-packages"))
    assert len(found) == 1, found
    return found[0]


def _only(folder: Path, pattern: str) -> Path:
    found = sorted(folder.glob(pattern))
    assert len(found) == 1, found
    return found[0]
