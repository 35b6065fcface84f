"""The real lmms-eval (its `openai` model) against a real `dpmtv serve` on 127.0.0.1, on a local
task (a JSON file beside a task YAML; no hub). lmms-eval exits 0 even when every request failed,
so the per-sample results are checked: the bare model's answers and scores equal `dpmtv eval`'s
zero-shot predictions on the same queries, and the private vector's equal `dpmtv answer`'s.

Install: pip install -e '.[lmms]' && pip install --no-deps lmms-eval==0.7.3 (a plain
`pip install lmms-eval` replaces the CPU torch with a CUDA build)."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from dpmtv.eval.generation import clean_prediction
from dpmtv.eval.scorers import open_exact_match

pytest.importorskip(
    "lmms_eval",
    reason="pip install -e '.[lmms]' && pip install --no-deps lmms-eval==0.7.3",
    exc_type=ImportError,
)

pytestmark = pytest.mark.slow
CLI = [sys.executable, "-c", "import sys; from dpmtv.cli import main; sys.exit(main())"]
TASK = Path(__file__).parent / "lmms_task"
HEADS = [[0, 1], [0, 4], [0, 5], [0, 6]]  # the embedded model's public heads for name_colour
# The task YAML sets no max_new_tokens, so lmms-eval sends its default max_tokens=1024, as for most
# tasks; the server generates up to its cap (--max-tokens, 256) and says "length" if it cuts.
MAX_NEW_TOKENS = 256


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _write_records(folder: Path, split: str, count: int, seed: int) -> Path:
    from dpmtv.embedded.generator import get_task
    from dpmtv.embedded.suite import task_records

    (folder / "img").mkdir(parents=True, exist_ok=True)
    rows = []
    for index, record in enumerate(task_records(get_task("name_colour"), count, seed=seed, split=split)):
        record.images[0].save(folder / "img" / f"{index}.png")
        rows.append({"id": record.record_id, "image": f"img/{index}.png", "question": record.question})
        rows[-1]["answer"] = record.answer
    path = folder / "records.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def _dpmtv(*args: str, cwd: Path) -> str:
    result = subprocess.run([*CLI, *args], cwd=cwd, capture_output=True, text=True, timeout=900, env=_env())
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout


def _env() -> dict[str, str]:
    return {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(sys.path),
        "HF_HUB_OFFLINE": "1",
        "HF_DATASETS_OFFLINE": "1",
        "OPENAI_API_KEY": "unused",  # the openai client wants one; the loopback server takes none
    }


@pytest.fixture(scope="module")
def work(tmp_path_factory):
    """Private records, a vector built from them, the task folder with its queries, the server."""
    root = tmp_path_factory.mktemp("lmms")
    private = _write_records(root / "private", "private", 128, seed=0)
    task = root / "task"
    shutil.copytree(TASK, task)
    queries = _write_records(task, "test", 8, seed=1)
    (root / "heads.json").write_text(json.dumps(HEADS))
    vector = root / "colour.safetensors"
    _dpmtv(
        "build", "--model", "embedded", "--data", str(private), "--heads", str(root / "heads.json"),
        "--epsilon", "4", "--delta", "1e-5", "--l2-clip-norm", "6.18", "--shots-per-chunk", "8",
        "--out", str(vector), "--quiet", cwd=root,
    )  # fmt: skip
    port = free_port()
    server = subprocess.Popen(
        [*CLI, "serve", "--model", "embedded", "--vector", f"colour={vector}", "--port", str(port),
         "--threads", "1", "--log-level", "warning"],
        env=_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 600
        while True:
            assert server.poll() is None, server.stdout.read()
            try:
                httpx.get(f"{url}/health", timeout=2).raise_for_status()
                break
            except httpx.HTTPError:
                assert time.monotonic() < deadline, "dpmtv serve did not come up in 600 s"
                time.sleep(0.5)
        yield {
            "root": root,
            "private": private,
            "task": task,
            "queries": queries,
            "vector": vector,
            "url": url,
        }
    finally:
        server.terminate()
        server.wait(timeout=60)
        server.stdout.close()


def _lmms_eval(work: dict, model: str) -> list[dict]:
    """Run lmms-eval's openai model on the local task; its per-sample records by doc_id."""
    out = work["root"] / f"lmms-{model}"
    command = [
        sys.executable, "-m", "lmms_eval", "eval", "--model", "openai",
        "--model_args", f"model_version={model},base_url={work['url']}/v1,max_retries=1",
        "--tasks", "dpmtv_local", "--include_path", str(work["task"]), "--log_samples",
        "--output_path", str(out), "--batch_size", "1",
    ]  # fmt: skip
    result = subprocess.run(
        command, cwd=work["task"], capture_output=True, text=True, timeout=900, env=_env()
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    [samples] = out.rglob("*_samples_dpmtv_local.jsonl")
    rows = [json.loads(line) for line in samples.read_text().splitlines()]
    return sorted(rows, key=lambda row: row["doc_id"])


def _answers(work) -> list[dict]:
    return [json.loads(line) for line in work["queries"].read_text().splitlines()]


def test_lmms_eval_on_the_bare_model_scores_what_dpmtv_eval_scores(work):
    out = work["root"] / "eval"
    _dpmtv(
        "eval", "--model", "embedded", "--data", str(work["private"]), "--eval-data", str(work["queries"]),
        "--methods", "zero-shot", "--seeds", "1", "--max-new-tokens", str(MAX_NEW_TOKENS), "--out", str(out),
        "--quiet", cwd=work["root"],
    )  # fmt: skip
    expected = {
        row["query"]: row["prediction"]
        for row in map(json.loads, (out / "predictions.jsonl").read_text().splitlines())
        if row["method"] == "zero-shot"
    }
    samples = _lmms_eval(work, "embedded")
    queries = _answers(work)
    assert len(samples) == len(queries) == len(expected) == 8
    for sample, query in zip(samples, queries):
        response = sample["filtered_resps"]
        response = response[0] if isinstance(response, list) else response
        assert "LMMS_EVAL_REQUEST_FAILED" not in response, response
        assert clean_prediction(response) == expected[query["id"]], query["id"]
        assert sample["accuracy"] == open_exact_match(expected[query["id"]], query["answer"])


def test_lmms_eval_on_a_private_vector_gets_dpmtv_answer_s_answers(work):
    stdout = _dpmtv(
        "answer", "--model", "embedded", "--vector", str(work["vector"]), "--queries", str(work["queries"]),
        "--max-new-tokens", str(MAX_NEW_TOKENS), "--json", cwd=work["root"],
    )  # fmt: skip
    expected = {row["id"]: row["answer"] for row in map(json.loads, stdout.splitlines())}
    samples = _lmms_eval(work, "colour")
    for sample, query in zip(samples, _answers(work), strict=True):
        response = sample["filtered_resps"]
        response = response[0] if isinstance(response, list) else response
        assert "LMMS_EVAL_REQUEST_FAILED" not in response, response
        assert response.strip() == expected[query["id"]], query["id"]
        assert sample["accuracy"] == open_exact_match(
            clean_prediction(expected[query["id"]]), query["answer"]
        )
