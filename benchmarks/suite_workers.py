"""The ``workers`` section of ``benchmarks/suite.py``: build extraction throughput with 1 and 2 Ray
workers (target >= 1.6x) next to the local loop, and private selection's votes on the same
workers; the load average is recorded (other processes share the CPUs)."""

from __future__ import annotations

import dataclasses
import os
import time
from pathlib import Path

import torch

NOTE = (
    "Ray actors with 1 CPU each (torch uses 1 thread per actor); the local loop is timed at the "
    "default torch threads and at 1. All after a warm-up pass. 'votes': private head selection's "
    "per-chunk votes on the same actors."
)


def worker_rates(photos: Path, settings, tmp: Path, options) -> dict:
    """Chunks per second locally and on the Ray pools, and the 2-over-1 speed-ups."""
    import ray

    from dpmtv.data import load_records
    from dpmtv.data.synthetic import write_colour_records
    from dpmtv.models.loading import load_model

    loaded = load_model("embedded", device=options.device, dtype=options.dtype)
    records = load_records(photos)
    part, task = _chunk_task(loaded, records, settings)
    out = {"model": "embedded", "chunks": part.num_chunks, "shots": settings.shots_per_chunk}
    out.update(_local_rates(loaded, records, part, task))
    # private selection's votes (forward + backward per chunk) on the same actors, on records
    # whose answers the embedded model's vocabulary spells (the photos' 'colour N' it cannot)
    shots = settings.shots_per_chunk
    voters = load_records(write_colour_records(tmp / "votes", shots * options.vote_chunks, seed=3))
    vote_chunks = [voters[start : start + shots] for start in range(0, len(voters), shots)]
    # 3 logical CPUs: the 1-worker and the 2-worker pools stay up together, so their timed passes
    # alternate (1, 2, 1, 2, ...) and the machine's other load hits both alike
    ray.init(num_cpus=3, include_dashboard=False, logging_level="WARNING")
    try:
        out.update(_ray_rates(loaded, records, part, task, vote_chunks, options))
    finally:
        ray.shutdown()
    for prefix in ("", "votes_"):
        best = {count: out[f"{prefix}workers_{count}"]["chunks_per_s_best"] for count in (1, 2)}
        out[f"{prefix}speedup_2_over_1"] = best[2] / best[1]
    out["vote_chunks"] = len(vote_chunks)
    out["note"] = NOTE
    return out


def _chunk_task(loaded, records, settings):
    """The release part and the clipped-sum task over all heads, as the build plans them."""
    from dpmtv.forward.prompt_budget import resolve_max_prompt_tokens
    from dpmtv.heads import parse_head_spec
    from dpmtv.pipeline.build import reference_activations
    from dpmtv.pipeline.plan import plan_layout
    from dpmtv.pipeline.tasks import ChunkJob, ClippedSum

    heads = parse_head_spec("all", loaded.adapter.geometry)
    settings = dataclasses.replace(settings, max_prompt_tokens=None)
    layout = plan_layout(loaded, records, heads, settings)
    settings = dataclasses.replace(
        settings, max_prompt_tokens=resolve_max_prompt_tokens(loaded.adapter, None)
    )
    job = ChunkJob(heads, settings, reference_activations(loaded, heads, settings), layout.l2_clip_norms)
    return layout.release_part, ClippedSum(job)


def _local_rates(loaded, records, part, task) -> dict:
    """The local loop at the default torch threads and at 1, after a warm-up pass."""
    from dpmtv.forward.executor import LocalExecutor

    out = {}
    default_threads = torch.get_num_threads()
    LocalExecutor().run(loaded, records, part, task)  # warm-up
    for threads in sorted({default_threads, 1}, reverse=True):
        torch.set_num_threads(threads)
        started = time.perf_counter()
        LocalExecutor().run(loaded, records, part, task)
        out[f"local_torch_threads_{threads}_chunks_per_s"] = part.num_chunks / (time.perf_counter() - started)
    torch.set_num_threads(default_threads)
    return out


def _ray_rates(loaded, records, part, task, vote_chunks, options) -> dict:
    """Build and vote passes on a 1-worker and a 2-worker pool, alternating, after a warm-up."""
    from dpmtv.distributed import RayExecutor
    from dpmtv.forward.executor import ModelSource
    from dpmtv.selection import chunk_votes

    source = ModelSource("embedded", device=options.device, dtype=options.dtype)
    gpus = 0.3 if options.device.startswith("cuda") else 0.0  # three actors share one GPU
    pools = {
        count: RayExecutor(source, workers=count, chunks_per_batch=2, gpus_per_worker=gpus)
        for count in (1, 2)
    }
    for executor in pools.values():  # warm-up: actors load the model
        executor.run(loaded, records, part, task)
        chunk_votes(loaded, vote_chunks[:4], max_votes_per_chunk=8, progress=False, executor=executor)
    runs = {("build", 1): [], ("build", 2): [], ("votes", 1): [], ("votes", 2): []}
    loads = []
    for _ in range(options.worker_repeats):
        for count, executor in pools.items():
            loads.append(os.getloadavg()[0])
            started = time.perf_counter()
            executor.run(loaded, records, part, task)
            runs["build", count].append(part.num_chunks / (time.perf_counter() - started))
            started = time.perf_counter()
            chunk_votes(loaded, vote_chunks, max_votes_per_chunk=8, progress=False, executor=executor)
            runs["votes", count].append(len(vote_chunks) / (time.perf_counter() - started))
    for executor in pools.values():
        executor.close()
    out = {}
    for (work, count), values in runs.items():
        name = f"workers_{count}" if work == "build" else f"votes_workers_{count}"
        out[name] = {"chunks_per_s_best": max(values), "chunks_per_s_all": values}
    out["load_average_1min_during"] = [min(loads), max(loads)]
    return out
