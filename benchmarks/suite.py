"""The benchmark suite: one command, JSON results and a markdown summary with every measured ratio
next to its target.

    python benchmarks/suite.py [--only pipeline,workers,memory,latency,sigma,realsize]
        [--realsize smolvlm-256m,qwen2-vl-2b] [--device cpu] [--dtype float32] [--tag cpu]

Writes ``benchmarks/results/suite_<tag>.json`` (each section keeps its own command, machine and
load average; sections not rerun keep their previous values) and ``suite_<tag>.md``.

Sections (each short on a CPU; sizes are in the results):

- ``pipeline``: private extraction throughput on the embedded model with the input pipeline off
  (prompts rendered and encoded in the forward pass's thread) and on (one background thread), and
  the fraction of wall time the forward pass waits for its inputs;
- ``workers``: build extraction throughput with 1 and 2 Ray workers (target >= 1.6x), next to
  the local loop, and private selection's votes on the same workers; the load average is
  recorded (other processes share the CPUs);
- ``memory``: peak RSS of a fresh process building over N = 256 … 16,384 records at fixed public
  m (add-remove-one, so compute is constant and only the records scale; target: flat, <= 1.1);
- ``latency``: time to the first answer token: zero-shot, zero-shot with the DP-MTV vector
  (target <= 1.03x), 16-shot and 64-shot ICL prompts (tiny LLaVA);
- ``sigma``: σ used / analytic σ for the default OpenDP sampler and the CSPRNG sampler;
- ``realsize``: random-weight SmolVLM-256M / Qwen2-VL-2B geometry: per-chunk extraction cost,
  hook overhead and the 64-shot ICL / DP-MTV query latency ratio.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
from PIL import Image

sys.path.insert(0, str(Path(__file__).resolve().parent))

RESULTS = Path(__file__).resolve().parent / "results"
TARGETS = {
    "workers.speedup_2_over_1": (">=", 1.6),
    "memory.ratio_peak_rss_largest_over_smallest": ("<=", 1.1),
    "latency.ratio_dpmtv_over_zero_shot": ("<=", 1.03),
    "realsize.*.ratio_dpmtv_over_zero_shot": ("<=", 1.03),
}


def machine() -> dict:
    return {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "cpus": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "cuda": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
        "load_average_1_5_15": os.getloadavg(),
    }


def write_photo_records(folder: Path, count: int, *, px: int = 384, seed: int = 0) -> Path:
    """Records with photo-sized noisy PNG images (decoding costs what a real image costs)."""
    from dpmtv.data.records import write_jsonl

    rng = np.random.default_rng(seed)
    (folder / "img").mkdir(parents=True, exist_ok=True)
    rows = []
    for index in range(count):
        base = rng.integers(0, 256, 3)
        pixels = np.clip(base + rng.normal(0, 30, (px, px, 3)), 0, 255).astype(np.uint8)
        Image.fromarray(pixels).save(folder / "img" / f"{index}.png")
        rows.append({"id": f"r{index}", "image": f"img/{index}.png", "question": "What colour is it?",
                     "answer": f"colour {int(base[0]) % 5}"})  # fmt: skip
    return write_jsonl(rows, folder / "records.jsonl")


def _settings(shots: int, **extra):
    from dpmtv.pipeline.build import BuildSettings

    return BuildSettings(
        epsilon=1.0, delta=1e-6, l2_clip_norm=(1.0,), shots_per_chunk=shots, progress=False, **extra
    )


# ---------------------------------------------------------------- pipeline
def pipeline(tmp: Path, options) -> dict:
    from dpmtv.data import load_records
    from dpmtv.forward._prefetch import PipelineTimings
    from dpmtv.forward.extract import extract_each_chunk
    from dpmtv.forward.prompt_budget import resolve_max_prompt_tokens
    from dpmtv.heads import parse_head_spec
    from dpmtv.models.loading import load_model
    from dpmtv.pipeline.partition import ChunkPrompts
    from dpmtv.privacy import Partition

    shots, chunks = 8, options.pipeline_chunks
    loaded = load_model("embedded", device=options.device, dtype=options.dtype)
    records = load_records(write_photo_records(tmp / "photos", shots * chunks))
    partition = Partition(
        chunks=tuple(np.arange(c * shots, (c + 1) * shots) for c in range(chunks)), num_unused=0
    )
    prompts = ChunkPrompts(records, partition, shots_per_chunk=shots, query="record", query_question="")
    heads = parse_head_spec("all", loaded.adapter.geometry)
    budget = resolve_max_prompt_tokens(loaded.adapter, None)
    out = {"model": "embedded", "chunks": chunks, "shots": shots, "image_px": 384}
    default_threads = torch.get_num_threads()
    for threads in sorted({default_threads, 1}, reverse=True):
        torch.set_num_threads(threads)
        runs = {}
        for label, depth in (("off", 0), ("on", 2), ("off_again", 0), ("on_again", 2)):
            timings = PipelineTimings()
            started = time.perf_counter()
            for _ in extract_each_chunk(
                loaded.adapter, prompts, heads, max_prompt_tokens=budget, prefetch=depth, timings=timings
            ):
                pass
            wall = time.perf_counter() - started
            runs[label] = {"chunks_per_s": chunks / wall, "forward_waits_fraction": timings.wait_s / wall}
        best = {k: max(runs[k]["chunks_per_s"], runs[f"{k}_again"]["chunks_per_s"]) for k in ("off", "on")}
        runs["speedup_on_over_off"] = best["on"] / best["off"]
        out[f"torch_threads_{threads}"] = runs
    torch.set_num_threads(default_threads)
    out["note"] = ("'off': each prompt is rendered and encoded in the forward pass's thread, so the "
                   "'waits' fraction is the share of time spent preparing inputs; 'on': one background "
                   "thread prepares the next 2 prompts. Best of two interleaved runs each.")  # fmt: skip
    return out


# ---------------------------------------------------------------- workers
def workers(tmp: Path, options) -> dict:
    """Build extraction and private selection's votes on 1 and 2 Ray workers (suite_workers.py)."""
    from suite_workers import worker_rates

    shots = 8
    photos = write_photo_records(tmp / "wphotos", shots * options.worker_chunks, seed=1)
    return worker_rates(photos, _settings(shots), tmp, options)


# ---------------------------------------------------------------- memory
MEMORY_CODE = """
import resource, sys, pathlib
sys.path.insert(0, {bench!r})
from dpmtv.pipeline.build import BuildSettings, build_task_vector
from dpmtv.data.records import load_records
from dpmtv.heads import parse_head_spec
from dpmtv.models.loading import load_model
loaded = load_model({model!r})
records = load_records({data!r})
settings = BuildSettings(epsilon=1.0, delta=1e-6, l2_clip_norm=(1.0,), shots_per_chunk=8,
    neighbouring_relation="add-remove-one", num_chunks=16, progress=False)
build_task_vector(loaded, records, parse_head_spec("all", loaded.adapter.geometry), settings)
print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)
"""


def memory(tmp: Path, options) -> dict:
    from dpmtv.data.synthetic import write_colour_records
    from dpmtv.testing import build_tiny_checkpoint

    model = build_tiny_checkpoint("llava", tmp / "mem-model")
    out = {"model": "tiny llava", "num_chunks": 16, "shots": 8, "relation": "add-remove-one"}
    sizes = [int(n) for n in options.memory_sizes.split(",")]
    for n in sizes:
        data = write_colour_records(tmp / f"mem{n}", n, seed=n)
        code = MEMORY_CODE.format(bench=str(Path(__file__).parent), model=str(model), data=str(data))
        done = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True)
        out[f"n{n}_peak_rss_mib"] = int(done.stdout.strip().splitlines()[-1]) / 1024
    out["ratio_peak_rss_largest_over_smallest"] = (
        out[f"n{sizes[-1]}_peak_rss_mib"] / out[f"n{sizes[0]}_peak_rss_mib"]
    )
    return out


# ---------------------------------------------------------------- latency
def first_token_latency(
    loaded, vector, records, *, shots_list=(16, 64), repeats: int = 5, pairs: int = 15
) -> dict:
    """Seconds to the first answer token (one forward pass over the prompt), min over repeats:
    ``pairs`` interleaved zero-shot / zero-shot-with-the-vector passes (the hook overhead, a
    small difference: many cheap repeats, each after a warm-up pass of its kind), and
    ``repeats`` of each ``shots``-shot ICL prompt."""
    from dpmtv.data.prompts import Example, Prompt, zero_shot
    from dpmtv.inference import apply

    query = records[-1]
    prompts = {"zero_shot": zero_shot(Example(query.load_images(), query.question))}
    for shots in shots_list:
        demos = tuple(Example(r.load_images(), r.question, r.answer) for r in records[:shots])
        prompts[f"icl_{shots}"] = Prompt(demos, Example(query.load_images(), query.question))
    inputs = {name: loaded.adapter.encode([prompt]) for name, prompt in prompts.items()}
    timings = {name: [] for name in [*inputs, "dpmtv"]}

    def forward(batch):
        started = time.perf_counter()
        with torch.no_grad():
            loaded.model(**batch)
        return time.perf_counter() - started

    for name in inputs:
        forward(inputs[name])  # warm-up
    for _ in range(pairs):
        # each timed pass follows an untimed one of its kind: entering apply() checks the model's
        # fingerprint (hashing every o_proj weight), which would leave the first patched pass
        # with cold caches; a server applies its vector once and then answers many queries
        forward(inputs["zero_shot"])
        timings["zero_shot"].append(forward(inputs["zero_shot"]))
        with apply(loaded, vector):
            forward(inputs["zero_shot"])
            timings["dpmtv"].append(forward(inputs["zero_shot"]))
    for _ in range(repeats):
        for shots in shots_list:
            timings[f"icl_{shots}"].append(forward(inputs[f"icl_{shots}"]))
    best = {name: min(values) for name, values in timings.items()}
    out = {f"{name}_s": value for name, value in best.items()}
    out["zero_shot_and_dpmtv_pairs"] = pairs
    out["icl_repeats"] = repeats
    out["prompt_tokens"] = {name: int(batch["input_ids"].shape[1]) for name, batch in inputs.items()}
    out["ratio_dpmtv_over_zero_shot"] = best["dpmtv"] / best["zero_shot"]
    for shots in shots_list:
        out[f"ratio_icl_{shots}_over_dpmtv"] = best[f"icl_{shots}"] / best["dpmtv"]
    return out


def latency(tmp: Path, options) -> dict:
    from dpmtv.data import load_records
    from dpmtv.data.synthetic import write_colour_records
    from dpmtv.heads import parse_head_spec
    from dpmtv.models.loading import load_model
    from dpmtv.pipeline.build import build_task_vector
    from dpmtv.testing import build_tiny_checkpoint

    loaded = load_model(build_tiny_checkpoint("llava", tmp / "lat-model"), device=options.device)
    records = load_records(write_colour_records(tmp / "lat", 128, seed=0))
    vector = build_task_vector(
        loaded, records, parse_head_spec("all", loaded.adapter.geometry), _settings(8)
    ).vector
    return {"model": "tiny llava", **first_token_latency(loaded, vector, records, repeats=7, pairs=31)}


# ---------------------------------------------------------------- sigma
def sigma(tmp: Path, options) -> dict:
    from dpmtv.privacy import l2_sensitivity, make_sampler
    from dpmtv.privacy.relation import NeighbouringRelation
    from dpmtv.privacy.release import plan_gaussian_release

    out = {}
    delta_l2 = l2_sensitivity(
        l2_clip_norms=[1.0] * 4, num_chunks=64, relation=NeighbouringRelation.REPLACE_ONE
    )
    for name in ("opendp", "csprng-numpy"):
        for epsilon in (0.5, 1.0, 4.0, 8.0):
            plan = plan_gaussian_release(
                l2_sensitivity=delta_l2, epsilon=epsilon, delta=1e-6, sampler=make_sampler(name)
            )
            out[f"{name}_eps{epsilon:g}_sigma_used_over_analytic"] = plan.noise_std / plan.noise_std_analytic
    out["setting"] = "4 layers with C = 1, m = 64, replace-one, delta = 1e-6"
    return out


# ---------------------------------------------------------------- realsize
def realsize(tmp: Path, options) -> dict:
    from realsize_models import BUILDERS

    from dpmtv.data import load_records
    from dpmtv.heads import parse_head_spec
    from dpmtv.models.loading import load_model
    from dpmtv.pipeline.build import BuildSettings, build_task_vector

    out = {}
    for name in options.realsize.split(","):
        image_px = options.realsize_px.get(name)
        started = time.perf_counter()
        folder = BUILDERS[name](tmp / name, **({"image_px": image_px} if image_px else {}))
        build_s = time.perf_counter() - started
        loaded = load_model(folder, device=options.device, dtype=options.dtype)
        records = load_records(write_photo_records(tmp / f"{name}-data", 80, px=image_px or 384, seed=2))
        geometry = loaded.adapter.geometry
        shots, chunks = options.realsize_shots, options.realsize_chunks
        heads = parse_head_spec(f"layers:{geometry.num_layers // 2}-{geometry.num_layers - 1}", geometry)
        settings = BuildSettings(epsilon=4.0, delta=1e-6, l2_clip_norm=(5.0,), shots_per_chunk=shots,
                                 neighbouring_relation="add-remove-one", num_chunks=chunks,
                                 insecure_seed=0, allow_insecure_seed=True, progress=False)  # fmt: skip
        started = time.perf_counter()
        vector = build_task_vector(loaded, records[: shots * chunks], heads, settings).vector
        per_chunk = (time.perf_counter() - started) / chunks
        result = {
            "geometry": {"layers": geometry.num_layers, "heads": geometry.num_heads,
                         "head_dim": geometry.head_dim},
            "parameters_millions": sum(p.numel() for p in loaded.model.parameters()) / 1e6,
            "image_px": image_px, "dtype": options.dtype, "device": options.device,
            "build_checkpoint_s": build_s, "chunks": chunks, "shots_per_chunk": shots,
            "heads_released": len(heads.pairs),
            "seconds_per_chunk": per_chunk,
        }  # fmt: skip
        result.update(
            first_token_latency(
                loaded,
                vector,
                records,
                shots_list=(16, 64),
                repeats=options.realsize_repeats,
                pairs=options.realsize_pairs,
            )
        )
        result["command"] = " ".join(["python", "benchmarks/suite.py", *sys.argv[1:]])
        result["load_average_1_5_15"] = os.getloadavg()
        out[name] = result
        del loaded
    return out


SECTIONS = {"pipeline": pipeline, "workers": workers, "memory": memory, "latency": latency,
            "sigma": sigma, "realsize": realsize}  # fmt: skip


def ratios(document: dict) -> list[tuple[str, float, str]]:
    """(name, value, target) for every ratio measured."""
    rows = []

    def walk(value, prefix):
        if isinstance(value, dict):
            for key, item in value.items():
                walk(item, f"{prefix}.{key}" if prefix else key)
        elif isinstance(value, float) and (
            "ratio" in prefix.rsplit(".", 1)[-1]
            or "speedup" in prefix
            or "fraction" in prefix
            or "over_analytic" in prefix
        ):
            rows.append((prefix, value, _target(prefix)))

    for section, result in document.items():
        walk(result.get("result", {}), section)
    return rows


def _target(name: str) -> str:
    import fnmatch

    for pattern, (op, value) in TARGETS.items():
        if fnmatch.fnmatch(name, pattern):
            return f"{op} {value:g}"
    return "—"


def markdown(document: dict, tag: str) -> str:
    lines = [f"# Benchmark suite ({tag})", "",
             "Every ratio measured, with its target where the design sets one.", "",
             "| measurement | value | target | met |", "|---|---|---|---|"]  # fmt: skip
    for name, value, target in ratios(document):
        met = "—"
        if target != "—":
            op, bound = target.split()
            met = "yes" if (value >= float(bound) if op == ">=" else value <= float(bound)) else "NO"
        lines.append(f"| `{name}` | {value:.4g} | {target} | {met} |")
    lines += ["", "Sections (command, machine, load average):", ""]
    for section, entry in document.items():
        load = entry["machine"]["load_average_1_5_15"]
        lines.append(f"- `{section}`: `{entry['command']}`; load average {load}; "
                     f"{entry['seconds']:.0f} s")  # fmt: skip
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--only", default=",".join(SECTIONS))
    parser.add_argument("--tag", default="cpu")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--pipeline-chunks", type=int, default=12)
    parser.add_argument("--worker-chunks", type=int, default=48)
    parser.add_argument("--worker-repeats", type=int, default=3)
    parser.add_argument("--vote-chunks", type=int, default=16)
    parser.add_argument("--memory-sizes", default="256,1024,4096,16384")
    parser.add_argument("--realsize", default="smolvlm-256m")
    parser.add_argument("--realsize-px", default="smolvlm-256m=128,qwen2-vl-2b=56")
    parser.add_argument("--realsize-shots", type=int, default=4)
    parser.add_argument("--realsize-chunks", type=int, default=3)
    parser.add_argument("--realsize-repeats", type=int, default=2)
    parser.add_argument("--realsize-pairs", type=int, default=11)
    options = parser.parse_args()
    options.realsize_px = {k: int(v) for k, v in (p.split("=") for p in options.realsize_px.split(",") if p)}
    out = RESULTS / f"suite_{options.tag}.json"
    document = json.loads(out.read_text()) if out.exists() else {}
    command = " ".join(["python", "benchmarks/suite.py", *sys.argv[1:]])
    for section in options.only.split(","):
        with tempfile.TemporaryDirectory() as tmp:
            started = time.perf_counter()
            result = SECTIONS[section](Path(tmp), options)
            if section == "realsize" and section in document:  # one entry per model, kept across runs
                result = {**document[section]["result"], **result}
            seconds = time.perf_counter() - started
            document[section] = {"command": command, "machine": machine(), "seconds": seconds,
                                 "result": result}  # fmt: skip
        out.write_text(json.dumps(document, indent=2) + "\n")  # after each section: nothing lost
        print(section, json.dumps(result, indent=2), flush=True)
    (RESULTS / f"suite_{options.tag}.md").write_text(markdown(document, options.tag))


if __name__ == "__main__":
    main()
