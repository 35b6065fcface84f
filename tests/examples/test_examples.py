"""Every script in examples/ runs on a tiny random-weight checkpoint standing in for the user's
folder, in a subprocess as a user would run it: it exits 0 and writes what its docstring says."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import write_records

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def user_files(tmp_path_factory):
    """The user's records: private ones to build from, public ones for head selection, labelled
    test ones for evaluation and serving."""
    root = tmp_path_factory.mktemp("user")
    return {
        "private": write_records(root / "private", 24),
        "public": write_records(root / "public", 12, seed=1),
        "test": write_records(root / "test", 4, seed=2),
    }


def _run(script: str, *args: object, cwd: Path) -> str:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path), "HF_HUB_OFFLINE": "1"}
    command = [sys.executable, str(EXAMPLES / script), *map(str, args)]
    result = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=1200)
    assert result.returncode == 0, f"{script}\n{result.stdout[-4000:]}\n{result.stderr[-4000:]}"
    return result.stdout


def test_every_example_has_a_test():
    tested = {name.split("test_", 1)[1] for name in globals() if name.startswith("test_") and "_py" in name}
    scripts = {path.stem + "_py" for path in EXAMPLES.glob("*.py")}
    assert scripts <= tested, f"examples without a test: {sorted(scripts - tested)}"


def test_own_checkpoint_py(tiny_llava_path, user_files, tmp_path):
    files = user_files
    args = ["--public", files["public"], "--test", files["test"], "--k", "4", "--shots-per-chunk", "4"]
    _run("own_checkpoint.py", tiny_llava_path, files["private"], *args, "--out", "out", cwd=tmp_path)
    out = tmp_path / "out"
    assert json.loads((out / "heads.json").read_text())["heads"]
    for name in ("task.safetensors", "task.README.md", "answer.txt", "eval/report.md"):
        assert (out / name).is_file(), name


def test_python_api_py(tiny_llava_path, user_files, tmp_path):
    stdout = _run("python_api.py", tiny_llava_path, user_files["private"], "--out", "out", cwd=tmp_path)
    assert (tmp_path / "out" / "task.safetensors").is_file() and "(1.0, 1e-05)-DP" in stdout


def test_private_only_py(tiny_llava_path, user_files, tmp_path):
    _run("private_only.py", tiny_llava_path, user_files["private"], "--shots-per-chunk", "4",
         "--selection-candidates", "layer-blocks", "--out", "out", cwd=tmp_path)  # fmt: skip
    metadata = json.loads((tmp_path / "out" / "inspect.json").read_text())
    assert metadata["privacy"]["private"] and metadata["privacy"]["clip_norm_selection"]
    assert (tmp_path / "out" / "private-only.safetensors").is_file()


def test_team_budget_py(tiny_llava_path, user_files, tmp_path):
    pytest.importorskip("model_signing", reason="the sign extra: pip install -e '.[sign]'")
    if shutil.which("openssl") is None:
        pytest.skip("the example makes its key with openssl")
    _run("team_budget.py", tiny_llava_path, user_files["private"], "--out", "out", cwd=tmp_path)
    out = tmp_path / "out"
    assert (out / "team.safetensors.sig").is_file() and (out / "ledger.sqlite").is_file()
    assert "ε = 1.0000" in (out / "budget.txt").read_text()


def test_serve_and_evaluate_py(tiny_llava_path, user_files, tmp_path):
    """With lmms-eval installed (as CI has it) the script also runs it against the served vector,
    which must answer every document (lmms-eval itself exits 0 when every request failed)."""
    pytest.importorskip("fastapi", reason="the serve extra: pip install -e '.[serve]'")
    lmms = importlib.util.find_spec("lmms_eval") is not None
    _run("serve_and_evaluate.py", tiny_llava_path, user_files["private"], "--test", user_files["test"],
         "--out", "out", *(["--lmms-eval"] if lmms else []), cwd=tmp_path)  # fmt: skip
    out = tmp_path / "out"
    reply = json.loads((out / "reply.json").read_text())
    # the vector's noise is fresh each run, so the tiny random model may answer its end token first
    # (an empty answer, finish "stop"): the example ran end to end when the reply has the OpenAI shape
    (choice,) = reply["choices"]
    assert reply["model"] == "mytask" and isinstance(choice["message"]["content"], str)
    assert choice["finish_reason"] in ("stop", "length")
    task = out / "lmms_task"
    rows = [json.loads(line) for line in (task / "records.jsonl").read_text().splitlines()]
    assert len(rows) == 4 and all((task / row["image"]).is_file() for row in rows)
    assert (task / "dpmtv_local.yaml").is_file() and (task / "utils.py").is_file()
    if lmms:
        [samples] = (out / "lmms-eval").rglob("*_samples_dpmtv_local.jsonl")
        answers = [json.loads(line)["filtered_resps"] for line in samples.read_text().splitlines()]
        assert len(answers) == 4 and not any("LMMS_EVAL_REQUEST_FAILED" in str(a) for a in answers)


def test_ray_build_py(tiny_llava_path, user_files, tmp_path):
    pytest.importorskip("ray", reason="the ray extra: pip install -e '.[ray]'")
    _run(
        "ray_build.py", tiny_llava_path, user_files["private"], "--workers", "2", "--out", "out", cwd=tmp_path
    )
    compare = json.loads((tmp_path / "out" / "compare.json").read_text())
    assert compare["workers"] == [1, 2]
    assert compare["max_abs_difference"] <= 1e-4 * max(1.0, compare["max_abs_value"])
