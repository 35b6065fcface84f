"""``dpmtv demo``: the whole pipeline (build → inspect → answer) on a packaged model.

Until the trained embedded model ships, the demo runs on a tiny random-weight LLaVA that the
package builds itself: it shows the mechanics and the privacy accounting, and its answers are
meaningless.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from PIL import Image
from rich.console import Console
from rich.panel import Panel

from dpmtv.build import BuildSettings, build_task_vector
from dpmtv.data.records import load_records, write_jsonl
from dpmtv.heads import parse_head_spec
from dpmtv.models.loading import load_model
from dpmtv.models.tiny import build_tiny_checkpoint
from dpmtv.vector import load_task_vector

COLOURS = {"red": (220, 30, 30), "green": (30, 200, 30), "blue": (30, 30, 220), "yellow": (230, 230, 30)}
QUESTION = "What colour is the image?"

PRIVACY_STATEMENT = (
    "Privacy: the released task vector is ({epsilon:g}, {delta:g})-differentially private with "
    "respect to replacing any one record of the {num_records} private records. Each record "
    "influences exactly one chunk's clipped activation; the mean over {num_chunks} chunks has L2 "
    "sensitivity {sensitivity:.4g} and Gaussian noise of std {noise_std:.4g} was added once. Every "
    "answer computed with the vector is post-processing: unlimited queries cost no further privacy."
)


def write_colour_records(folder: Path, count: int, *, seed: int) -> Path:
    """Synthetic records: a noisy solid-colour image, a question, the colour's name."""
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


def run_demo(out: Path, *, quick: bool, console: Console) -> None:
    out = Path(out)
    console.print(
        Panel(
            "This demo runs on a TINY RANDOM-WEIGHT LLaVA built on the fly: it exercises the whole "
            "DP-MTV pipeline, but its answers are meaningless. The trained embedded model replaces it "
            "in a later release.",
            title="dpmtv demo",
            style="yellow",
        )
    )
    model_dir = build_tiny_checkpoint("llava", out / "tiny-llava")
    data = write_colour_records(out / "data", 32 if quick else 256, seed=0)
    records = load_records(data)
    loaded = load_model(model_dir)
    heads = parse_head_spec("all", loaded.adapter.geometry)
    settings = BuildSettings(
        epsilon=1.0, delta=1e-5, l2_clip_norm=(1.0,), shots_per_chunk=8, progress=not quick
    )
    result = build_task_vector(loaded, records, heads, settings, out=out / "task.safetensors")
    console.print(f"wrote {result.path}")

    from dpmtv.apply import answer_queries
    from dpmtv.cli._common import print_vector_summary
    from dpmtv.prompts import Example

    vector = load_task_vector(result.path)
    print_vector_summary(vector.metadata, path=result.path)
    queries = [Example(r.load_images(), r.question) for r in records[:3]]
    plain = answer_queries(loaded, queries, max_new_tokens=6)
    patched = answer_queries(loaded, queries, vector=vector, max_new_tokens=6)
    for record, zero, with_vector in zip(records, plain, patched, strict=False):
        console.print(
            f"true {record.answer!r:10} zero-shot {zero!r:14} with vector {with_vector!r}", highlight=False
        )
    p = vector.metadata.privacy
    console.print(
        PRIVACY_STATEMENT.format(
            epsilon=p.epsilon,
            delta=p.delta,
            num_records=p.num_records,
            num_chunks=p.num_chunks,
            sensitivity=p.l2_sensitivity,
            noise_std=p.noise_std,
        )
    )
    console.print("[yellow]Reminder: random weights — the answers above are meaningless.[/]")
