"""Private extraction throughput: today's variable padding vs one chunk per forward pass vs fixed
public shapes (``docs/design.md``, "Fixed-shape private forward passes").

On the embedded model (``--model embedded``), N = 512 private records of one task, s = 8 shots
per chunk (m = 64 chunks), all heads captured. Variants:

- ``variable-padding-bB``: batches of B chunks, left-padded to the batch's longest prompt (the
  old private path; a chunk's values depend on the other rows);
- ``one-chunk-per-pass``: the chosen private path (:func:`dpmtv.forward.extract.extract_each_chunk`);
- ``fixed-shape-TxB``: every prompt padded to a public T tokens, batches filled to B with
  public dummy rows. Also checked here: whether fixed shapes alone make a chunk bitwise
  independent of the other rows (one record made longer, another chunk's record replaced).

Each variant is timed ``--repeats`` times after one warm-up pass; the best time is reported
(the machine is shared: its load average is recorded). The slow full-length fixed shape is timed
on the first 16 chunks only; the bitwise check uses the first 16 chunks of every variant. Usage:
    python benchmarks/private_forward_shapes.py [--out benchmarks/results/private_forward_shapes.json]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import platform
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import torch

from dpmtv.data.prompts import Example, Prompt, blank_image, chunk_prompt
from dpmtv.embedded.generator import task_suite
from dpmtv.embedded.suite import task_records
from dpmtv.forward.extract import extract_each_chunk, extract_selected_heads, selected_heads_of
from dpmtv.forward.prompt_budget import model_position_limit
from dpmtv.heads import parse_head_spec
from dpmtv.models.loading import load_model

SHOTS, NUM_RECORDS = 8, 512


def chunk_prompts(records) -> list[Prompt]:
    return [
        chunk_prompt(records[i : i + SHOTS], query="record", query_question="")
        for i in range(0, len(records), SHOTS)
    ]


def variable_padding(adapter, prompts, heads, batch_size: int) -> list[dict]:
    rows = []
    for start in range(0, len(prompts), batch_size):
        batch = extract_selected_heads(adapter, prompts[start : start + batch_size], heads)
        rows.extend({layer: v[i] for layer, v in batch.items()} for i in range(len(batch[heads.layers[0]])))
    return rows


def one_chunk_per_pass(adapter, prompts, heads) -> list[dict]:
    budget = model_position_limit(adapter)
    return [
        {layer: v[0] for layer, v in out.items()}
        for out in extract_each_chunk(adapter, prompts, heads, max_prompt_tokens=budget)
    ]


def fixed_shape(adapter, prompts, heads, *, tokens: int, batch_size: int) -> list[dict]:
    dummy = Prompt((), Example((blank_image(),), "dummy"))  # public filler row
    rows = []
    for start in range(0, len(prompts), batch_size):
        real = list(prompts[start : start + batch_size])
        batch = real + [dummy] * (batch_size - len(real))
        adapter.tokenizer.padding_side = "left"
        inputs = adapter.processor(
            text=[adapter.render_text(p) for p in batch],
            images=adapter.processor_images(batch),
            padding="max_length",
            max_length=tokens,
            return_tensors="pt",
        )
        if inputs["input_ids"].shape[1] != tokens:
            raise ValueError(f"a prompt is longer than the fixed {tokens} tokens")
        out = selected_heads_of(adapter, inputs, heads)
        rows.extend({layer: v[i] for layer, v in out.items()} for i in range(len(real)))
    return rows


def best_rate(run: Callable[[], list], num_chunks: int, repeats: int) -> float:
    run()  # warm-up
    seconds = []
    for _ in range(repeats):
        start = time.perf_counter()
        run()
        seconds.append(time.perf_counter() - start)
    return num_chunks / min(seconds)


def bitwise_independent(run: Callable[[Sequence[Prompt]], list], records) -> bool:
    """Make chunk 0's first record longer (a 5-word answer: 4 more tokens, still within the tight
    fixed shape) and replace a record of chunk 2; are all other chunks' values bitwise the same?"""
    changed = list(records)
    changed[0] = dataclasses.replace(records[0], answer=" ".join(["red"] * 5))
    changed[2 * SHOTS + 1] = records[-1]
    before, after = run(chunk_prompts(records)), run(chunk_prompts(changed))
    others = [c for c in range(len(before)) if c not in (0, 2)]
    return all(np.array_equal(before[c][layer], after[c][layer]) for c in others for layer in before[c])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/private_forward_shapes.json"))
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    torch.manual_seed(0)
    loaded = load_model("embedded")
    adapter = loaded.adapter
    heads = parse_head_spec("all", adapter.geometry)
    records = task_records(task_suite()[0], NUM_RECORDS, seed=0, split="private")
    prompts = chunk_prompts(records)
    lengths = [int(adapter.encode([p])["input_ids"].shape[1]) for p in prompts]
    limit = model_position_limit(adapter)
    tight = 64  # a public budget just above these prompts' length
    variants: dict[str, Callable[[Sequence[Prompt]], list]] = {  # name -> run(prompts)
        "variable-padding-b4": lambda ps: variable_padding(adapter, ps, heads, 4),
        "variable-padding-b16": lambda ps: variable_padding(adapter, ps, heads, 16),
        "one-chunk-per-pass": lambda ps: one_chunk_per_pass(adapter, ps, heads),
        f"fixed-shape-{tight}x4": lambda ps: fixed_shape(adapter, ps, heads, tokens=tight, batch_size=4),
        f"fixed-shape-{tight}x16": lambda ps: fixed_shape(adapter, ps, heads, tokens=tight, batch_size=16),
        f"fixed-shape-{limit}x4": lambda ps: fixed_shape(adapter, ps, heads, tokens=limit, batch_size=4),
    }
    results = {}
    for name, run in variants.items():
        timed = prompts[:16] if name == f"fixed-shape-{limit}x4" else prompts
        rate = best_rate(lambda run=run, timed=timed: run(timed), len(timed), args.repeats)
        independent = bitwise_independent(run, records[: 16 * SHOTS])
        results[name] = {"chunks_per_s": rate, "chunks_timed": len(timed), "bitwise_independent": independent}
        print(name, results[name], flush=True)
    base = results["variable-padding-b4"]["chunks_per_s"]
    for entry in results.values():
        entry["throughput_vs_variable_padding_b4"] = entry["chunks_per_s"] / base
    report = {
        "model": "embedded",
        "chunks": len(prompts),
        "shots_per_chunk": SHOTS,
        "prompt_tokens": {"min": min(lengths), "max": max(lengths)},
        "model_position_limit": limit,
        "repeats": args.repeats,
        "variants": results,
        "command": " ".join(["python", *sys.argv]),
        "machine": {
            "python": platform.python_version(),
            "torch": torch.__version__,
            "threads": torch.get_num_threads(),
            "cpus": os.cpu_count(),
            "load_average_1min_at_end": os.getloadavg()[0],
            "platform": platform.platform(),
        },
    }
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps(report, indent=2), file=sys.stderr)


if __name__ == "__main__":
    main()
