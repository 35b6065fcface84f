"""Serve a private vector over the OpenAI-compatible API and evaluate it with lmms-eval.

The tutorial docs/tutorials/serve-and-evaluate.md as one script: build a vector from the private
records, write a local lmms-eval task (the YAML and utils.py of examples/lmms_task/, with your
labelled test records and their images beside them), start `dpmtv serve`, ask it one question,
and with --lmms-eval run lmms-eval's `openai` model against it. Needs the serve extra; lmms-eval
needs `pip install -e '.[lmms]' && pip install --no-deps lmms-eval==0.7.3`.

    python examples/serve_and_evaluate.py MODEL private/records.jsonl --test test/records.jsonl \
        --out serve-out [--lmms-eval]

Writes OUT/task.safetensors, OUT/lmms_task/ (a task folder lmms-eval can run), OUT/reply.json
(the server's answer to the first test record) and with --lmms-eval its results in OUT/lmms-eval/.
"""

from __future__ import annotations

import argparse
import base64
import io
import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import dpmtv

TASK_TEMPLATE = Path(__file__).parent / "lmms_task"


def dpmtv_cli(*args: str) -> str:
    """Run one `dpmtv` command as a user would, echoing it; stop on its error line."""
    print("$ dpmtv", " ".join(args), flush=True)
    result = subprocess.run([sys.executable, "-m", "dpmtv", *args], stdout=subprocess.PIPE, text=True)
    print(result.stdout, end="", flush=True)
    if result.returncode:
        sys.exit(result.returncode)
    return result.stdout


def write_task(test: Path, folder: Path) -> list[dpmtv.Record]:
    """The task folder: the template's YAML and utils.py, and the test records as records.jsonl
    with their images under img/ (paths relative to the folder, as utils.doc_to_visual reads them)."""
    shutil.copytree(TASK_TEMPLATE, folder, dirs_exist_ok=True, ignore=shutil.ignore_patterns("__pycache__"))
    (folder / "img").mkdir(exist_ok=True)
    records, rows = dpmtv.load_records(test), []
    for index, record in enumerate(records):
        record.load_images()[0].convert("RGB").save(folder / "img" / f"{index}.png")
        rows.append({"image": f"img/{index}.png", "question": record.question, "answer": record.answer})
    (folder / "records.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    return records


def chat(url: str, model: str, record: dpmtv.Record) -> dict:
    """One OpenAI-style chat completion with the record's image as a data: URL (no client library)."""
    buffer = io.BytesIO()
    record.load_images()[0].convert("RGB").save(buffer, format="PNG")
    image = "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode()
    content = [{"type": "text", "text": record.question}, {"type": "image_url", "image_url": {"url": image}}]
    body = {"model": model, "max_tokens": 16, "messages": [{"role": "user", "content": content}]}
    request = urllib.request.Request(f"{url}/v1/chat/completions", data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})  # fmt: skip
    with urllib.request.urlopen(request, timeout=300) as response:
        return json.load(response)


def wait_for(url: str, server: subprocess.Popen, timeout_s: float = 600) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        if server.poll() is not None:
            sys.exit(f"error: dpmtv serve exited with {server.returncode}")
        try:
            with urllib.request.urlopen(f"{url}/health", timeout=2):
                return
        except OSError:
            if time.monotonic() > deadline:
                sys.exit(f"error: dpmtv serve did not answer on {url} within {timeout_s:.0f} s")
            time.sleep(0.5)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("model", help="checkpoint folder or hub id")
    parser.add_argument("records", type=Path, help="PRIVATE records (.jsonl, .csv or a datasets folder)")
    parser.add_argument("--test", type=Path, required=True, help="labelled test records (public queries)")
    parser.add_argument("--out", type=Path, default=Path("serve-out"))
    parser.add_argument("--heads", default="all", help="head spec, e.g. layers:8-15 or a `dpmtv select` file")
    parser.add_argument("--name", default="mytask", help="the vector's name, which clients put in `model`")
    parser.add_argument("--lmms-eval", action="store_true", help="also run lmms-eval against the server")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    vector = args.out / "task.safetensors"
    dpmtv_cli("build", "--model", args.model, "--data", str(args.records), "--heads", args.heads,
              "--epsilon", "1", "--delta", "1e-5", "--l2-clip-norm", "5", "--shots-per-chunk", "8",
              "--force", "--out", str(vector))  # fmt: skip
    records = write_task(args.test, args.out / "lmms_task")
    url = f"http://127.0.0.1:{free_port()}"
    command = [sys.executable, "-m", "dpmtv", "serve", "--model", args.model,
               "--vector", f"{args.name}={vector}", "--port", url.rsplit(":", 1)[1]]  # fmt: skip
    print("$ dpmtv", " ".join(command[3:]), flush=True)
    server = subprocess.Popen(command)
    try:
        wait_for(url, server)
        reply = chat(url, args.name, records[0])
        (args.out / "reply.json").write_text(json.dumps(reply, indent=1), encoding="utf-8")
        print(
            f"{args.name} answered {reply['choices'][0]['message']['content']!r} to {records[0].question!r}"
        )
        if args.lmms_eval:
            lmms = [sys.executable, "-m", "lmms_eval", "eval", "--model", "openai",
                    "--model_args", f"model_version={args.name},base_url={url}/v1",
                    "--tasks", "dpmtv_local", "--include_path", ".", "--log_samples",
                    "--output_path", str((args.out / "lmms-eval").resolve())]  # fmt: skip
            env = {**os.environ, "OPENAI_API_KEY": "unused-on-localhost"}
            subprocess.run(lmms, cwd=args.out / "lmms_task", env=env, check=True)
    finally:
        server.terminate()
        server.wait(timeout=60)
    print(f"wrote {vector}, {args.out / 'lmms_task'}, {args.out / 'reply.json'}")


if __name__ == "__main__":
    main()
