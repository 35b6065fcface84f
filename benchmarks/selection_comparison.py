"""Head selection compared on the embedded benchmark (issue 4, closing note).

DP-MTV accuracy at ε ∈ {0.5, 1, 2, 4} (δ = 1e-5, replace-one) with the head set chosen by

  (a) public REINFORCE, (b) public greedy, (c) public scored top-k — each through the library's
      ``select_public`` on the task's PUBLIC records (its default: the method's set then competes
      with whole-layer blocks and all heads on public dev queries, ``+best-of``); the method's own
      set before that contest is scored too (``raw`` rows), so a failing search is not hidden;
  (d) private selection — every chunk votes (``chunk_votes``), one-shot Gumbel noisy top-k of the
      vote histogram at ε_sel = 0.5·ε, release σ calibrated so that selection ∘ release meets
      (ε, δ) (sequential composition, ``plan_private_selection`` + ``plan_gaussian_release``);
  (e) all 32 heads;

plus the head set shipped with the model (``dpmtv_defaults.json``: one set for the whole suite,
chosen on public data) as a reference, zero-shot, and non-private MTV (unclipped mean) with each
head set. For (d) the MTV reference uses the exact (noiseless) top-k of the same votes.

Per (task, seed): N private records → a fresh random partition into m = N/s chunks (as the build
does), every head's last-token output per chunk extracted ONCE, then per head set and ε: select
the heads' columns, clip per layer, sum, divide by m, one Gaussian draw from the library's
release path (OpenDP sampler) — what ``build_task_vector`` computes, without re-extracting per ε
(``--cross-check`` builds two vectors with ``build_task_vector`` and compares σ and ε spent).
Clip norms (public, per layer): the median L2 norm of the head set's heads over the task's public
chunk vectors (the rule ``scripts/select_embedded_heads.py`` uses); for private selection, which
must fix them before any vote, the model's shipped per-layer norms (pool = all heads of those
layers), and Δ is the worst case over the k heads the selection may pick.

Public selection runs ONCE per task (public data do not depend on the experiment seed; the
selection's own seed is 0); seeds vary the private records, the partition, the noise (release and
Gumbel) and the test queries. Noise is the secure OpenDP sampler, so reruns differ in the draws.

Accuracy: greedy first answer token on held-out test images. Table: mean over tasks per seed,
then mean ± 95% t-interval over seeds. Torch runs on one thread (on a shared 2-core machine
multi-threaded batch-1 forwards were ~10× slower).

Usage: .venv/bin/python benchmarks/selection_comparison.py
       [--tasks name_colour,name_shape,is_red,is_green] [--seeds 0,1,2] [--records 2048]
       [--reinforce-steps 600] [--out benchmarks/results/selection_comparison.json] [--quick]
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import sys
import time
from pathlib import Path

import numpy as np
import torch

from dpmtv.data.prompts import chunk_prompt, zero_shot_prompts
from dpmtv.embedded import checkpoint_path
from dpmtv.embedded.generator import get_task
from dpmtv.embedded.suite import (
    PUBLIC_SEED,
    first_token_correct,
    task_records,
)
from dpmtv.forward.hooks import layer_patches
from dpmtv.heads import HeadSet
from dpmtv.models.loading import load_model
from dpmtv.pipeline.partition import ChunkPrompts, chunk_records
from dpmtv.privacy import (
    AdjacencyRelation,
    l2_sensitivity,
    make_sampler,
    partition_replace_one,
    secure_rng,
)
from dpmtv.privacy.noisy_top_k import head_vote_counts, noisy_top_k, plan_private_selection
from dpmtv.selection import chunk_votes

sys.path.insert(0, str(Path(__file__).resolve().parent))
from selection_comparison_parts import (  # noqa: E402
    Plans,
    all_heads,
    cross_check,
    describe,
    head_rows,
    layer_blocks,
    log,
    private_release,
    public_clip_norms,
    public_selections,
)
from selection_comparison_report import DELTA, METHOD_LABELS, PRIVATE_K, markdown, summarise  # noqa: E402

SELECTION_FRACTION = 0.5


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--tasks", default="name_colour,name_shape,is_red,is_green")
    p.add_argument("--seeds", default="0,1,2")
    p.add_argument("--epsilons", default="0.5,1,2,4")
    p.add_argument("--records", type=int, default=2048, help="private records per task (N)")
    p.add_argument("--shots", type=int, default=8, help="records per chunk (s)")
    p.add_argument("--test-queries", type=int, default=64)
    p.add_argument("--public-records", type=int, default=256, help="public records per task for selection")
    p.add_argument("--reinforce-steps", type=int, default=600)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--selection-fraction", type=float, default=SELECTION_FRACTION, help="ε_sel / ε for (d)")
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--no-cross-check", action="store_true")
    p.add_argument("--quick", action="store_true", help="smoke run: 1 task, 1 seed, tiny sizes")
    p.add_argument("--markdown-only", action="store_true", help="rewrite the .md from an existing --out JSON")
    p.add_argument("--out", type=Path, default=Path("benchmarks/results/selection_comparison.json"))
    args = p.parse_args(argv)
    if args.quick:
        args.tasks, args.seeds, args.records, args.test_queries = "is_red", "0", 256, 16
        args.public_records, args.reinforce_steps, args.epsilons = 64, 10, "1"
    return args


# ------------------------------------------------------------------------------------------------
# one (task, seed)
# ------------------------------------------------------------------------------------------------
class _Scores:
    """Accuracy rows of one (task, seed): each head set's values patched in, scored on the test."""

    def __init__(self, adapter, task, seed, test):
        self.adapter, self.task, self.seed = adapter, task, seed
        self.queries, self.answers = zero_shot_prompts(test), [r.answer for r in test]
        self.rows: list[dict] = []

    def __call__(self, method, epsilon, per_layer, heads, **extra):
        patches = layer_patches(per_layer, heads) if heads else None
        correct = first_token_correct(self.adapter, self.queries, self.answers, patches=patches)
        row = {"task": self.task.name, "seed": self.seed, "method": method, "epsilon": epsilon}
        self.rows.append({**row, "accuracy": float(np.mean(correct)), **extra})


def mtv_mean(raw, heads) -> dict[int, np.ndarray]:
    """The non-private MTV reference: the plain mean of the heads' chunk rows."""
    return {ly: v.mean(0) for ly, v in layer_blocks(raw, heads).items()}


def run_seed(loaded, task, seed, args, ctx) -> tuple[list[dict], dict]:
    private = task_records(task, args.records, seed=seed, split="private")
    test = task_records(task, args.test_queries, seed=seed, split="test")
    partition = partition_replace_one(len(private), shots_per_chunk=args.shots, rng=secure_rng())
    prompts = ChunkPrompts(private, partition, shots_per_chunk=args.shots, query="record", query_question="")
    started = time.perf_counter()
    raw = head_rows(loaded.adapter, prompts, args.batch_size)  # private per-chunk rows: memory only
    extract_s = time.perf_counter() - started
    assert len(raw) == partition.num_chunks, "every chunk is full for N divisible by s"
    score = _Scores(loaded.adapter, task, seed, test)
    score("zero-shot", None, None, None)
    score_public_sets(score, raw, partition.num_chunks, ctx)
    private_info = score_private_selection(score, loaded, raw, private, partition, args, ctx)
    private_info["extract_seconds"] = extract_s
    del raw
    return score.rows, private_info


def score_public_sets(score: _Scores, raw, m: int, ctx) -> None:
    """(a)-(c), (e) and the shipped set: MTV, then the build's release at every ε."""
    for name, heads in ctx["public_sets"].items():
        clip = ctx["clip_norms"][name]
        score(name, None, mtv_mean(raw, heads), heads, kind="mtv")
        sens = l2_sensitivity(
            l2_clip_norms=[clip[ly] for ly in heads.layers],
            num_chunks=m,
            relation=AdjacencyRelation.REPLACE_ONE,
        )
        for eps in ctx["epsilons"]:
            plan = ctx["plans"].get(sens, eps)
            score(name, eps, private_release(raw, heads, clip, m, plan, ctx["sampler"]), heads, kind="dp-mtv")


def private_vote_counts(loaded, private, partition, args, ctx) -> tuple[np.ndarray, float]:
    """Every chunk's votes over the private pool, counted: (counts per pool head, seconds)."""
    g = loaded.adapter.geometry
    started = time.perf_counter()
    votes = chunk_votes(
        loaded,
        chunk_records(private, partition, args.shots),
        max_votes_per_chunk=PRIVATE_K,
        pool=ctx["private_pool"],
        progress=False,
    )
    counts = head_vote_counts(votes, num_candidates=g.num_layers * g.num_heads, max_votes_per_chunk=PRIVATE_K)
    return counts[ctx["private_pool_flat"]], time.perf_counter() - started


def score_private_selection(score: _Scores, loaded, raw, private, partition, args, ctx) -> dict:
    """(d): every chunk votes once, then per ε the noisy top-k and the composed release (with
    the two non-private ablations); returns the selection's diagnostics."""
    num_heads, flat = loaded.adapter.geometry.num_heads, ctx["private_pool_flat"]  # pool flat ids
    counts, vote_s = private_vote_counts(loaded, private, partition, args, ctx)

    def heads_of(picked) -> HeadSet:
        return HeadSet.of(divmod(int(flat[i]), num_heads) for i in picked)

    exact = heads_of(noisy_top_k(counts, k=PRIVATE_K, epsilon=math.inf, allow_non_private=True))
    clip = ctx["private_clip"]
    note = "exact top-k of the votes (non-private)"
    score("d-private", None, mtv_mean(raw, exact), exact, kind="mtv", note=note)
    info = {
        "vote_seconds": vote_s,
        "exact_top_k": describe(exact),
        # PUBLIC diagnostic: the exact heads' median public norm per layer / the shipped clip norm
        "exact_heads_public_norm_over_clip": {
            str(ly): ctx["public_clip_of"](exact)[ly] / clip[ly] for ly in exact.layers
        },
        "per_epsilon": {},
    }
    for eps in ctx["epsilons"]:
        info["per_epsilon"][str(eps)] = score_private_epsilon(
            score, raw, counts, heads_of, exact, eps, partition.num_chunks, args, ctx
        )
    return info


def score_private_epsilon(score: _Scores, raw, counts, heads_of, exact, eps, m, args, ctx) -> dict:
    """(d) at one ε: the noisy top-k (OpenDP Gumbel) and the composed release, plus the two
    non-private ablations; returns that ε's diagnostics."""
    clip = ctx["private_clip"]
    sel_plan = plan_private_selection(
        total_epsilon=eps,
        total_delta=DELTA,
        k=PRIVATE_K,
        selection_fraction=args.selection_fraction,
        composition="sequential",
    )
    t0 = time.perf_counter()
    heads = heads_of(noisy_top_k(counts, k=PRIVATE_K, epsilon=sel_plan.epsilon_selection))
    topk_s = time.perf_counter() - t0
    plan = ctx["plans"].get(ctx["private_sensitivity"], eps, sel_plan)
    overlap = len(set(heads.pairs) & set(exact.pairs)) / PRIVATE_K
    release = private_release(raw, heads, clip, m, plan, ctx["sampler"])
    score(
        "d-private", eps, release, heads, kind="dp-mtv", selected=describe(heads), overlap_with_exact=overlap
    )
    # ablations (NOT private): which part of (d)'s loss is the release noise, which the choice
    score("d-abl-exact-heads", eps, private_release(raw, exact, clip, m, plan, ctx["sampler"]), exact)
    score("d-abl-noisy-heads", eps, mtv_mean(raw, heads), heads)
    return {
        "epsilon_selection": sel_plan.epsilon_selection,
        "gumbel_scale": sel_plan.noise_scale,
        "noisy_top_k_seconds": topk_s,
        "release_noise_std": plan.noise_std,
        "release_noise_multiplier": plan.noise_multiplier,
        "epsilon_spent": plan.epsilon_spent,
        "heads": describe(heads),
        "overlap_with_exact": overlap,
    }


def shared_setup(loaded, args, epsilons) -> dict:
    """What every task shares: the shipped defaults, the sampler and plan cache, and the private
    selection's pool (all heads of the layers with a shipped, public clip norm) and Δ."""
    g = loaded.adapter.geometry
    defaults = json.loads((checkpoint_path() / "dpmtv_defaults.json").read_text())
    shipped = HeadSet.of(map(tuple, defaults["heads"]))
    shipped_clip = dict(zip(shipped.layers, defaults["l2_clip_norm"], strict=True))
    sampler = make_sampler("opendp")
    pool_layers = sorted(shipped_clip)
    private_pool = HeadSet.of((ly, h) for ly in pool_layers for h in range(g.num_heads))
    private_sensitivity = l2_sensitivity(
        l2_clip_norms=sorted((shipped_clip[ly] for ly in pool_layers), reverse=True)[:PRIVATE_K],
        num_chunks=args.records // args.shots,
        relation=AdjacencyRelation.REPLACE_ONE,
    )
    return {
        "defaults": defaults,
        "shipped": shipped,
        "epsilons": epsilons,
        "plans": Plans(sampler),
        "sampler": sampler,
        "private_pool": private_pool,
        "private_pool_flat": np.array([ly * g.num_heads + h for ly, h in private_pool.pairs]),
        "private_clip": shipped_clip,
        "private_sensitivity": private_sensitivity,
        "private_pool_spec": "all"
        if len(pool_layers) == g.num_layers
        else "layers:" + ",".join(map(str, pool_layers)),
    }


def task_context(loaded, task, args, shared) -> tuple[dict, dict]:
    """Public selection on the task's public records and the public clip norms of every head set:
    (the context ``run_seed`` needs, the public selections' diagnostics)."""
    public = task_records(task, args.public_records, seed=PUBLIC_SEED, split="public")
    public_prompts = [
        chunk_prompt(public[i : i + args.shots], query="record", query_question="")
        for i in range(0, len(public) - args.shots + 1, args.shots)
    ]
    public_rows = head_rows(loaded.adapter, public_prompts, args.batch_size)
    sets, info = public_selections(loaded, public, args)
    sets["e-all"] = all_heads(loaded.adapter.geometry)
    sets["ref-shipped"] = shared["shipped"]
    clip_norms = {name: public_clip_norms(public_rows, heads) for name, heads in sets.items()}
    clip_norms["ref-shipped"] = shared["private_clip"]
    ctx = {
        **{k: v for k, v in shared.items() if k not in ("defaults", "shipped")},
        "public_clip_of": lambda heads, rows=public_rows: public_clip_norms(rows, heads),
        "public_sets": sets,
        "clip_norms": clip_norms,
    }
    return ctx, info


def task_summary(task, ctx, info, private_info, task_rows, m: int) -> dict:
    """One task's part of the result: selections, head sets, clip norms, Δ, accuracies."""
    clip_norms = ctx["clip_norms"]
    return {
        "held_out": task.held_out,
        "public_selection": info,
        "head_sets": {name: describe(h) for name, h in ctx["public_sets"].items()},
        "clip_norms": {name: {str(ly): c for ly, c in cn.items()} for name, cn in clip_norms.items()},
        "l2_sensitivity": {
            name: l2_sensitivity(
                l2_clip_norms=list(cn.values()), num_chunks=m, relation=AdjacencyRelation.REPLACE_ONE
            )
            for name, cn in clip_norms.items()
        },
        "private_selection": private_info,
        "accuracy": {
            f"{meth}|{eps}": float(
                np.mean([r["accuracy"] for r in task_rows if r["method"] == meth and r["epsilon"] == eps])
            )
            for meth, eps in {(r["method"], r["epsilon"]) for r in task_rows}
        },
    }


def run_task(loaded, task, seeds, args, ctx) -> tuple[list[dict], dict]:
    """Every seed of one task: (rows, private selection diagnostics per seed)."""
    rows, private_info = [], {}
    for seed in seeds:
        t0 = time.perf_counter()
        seed_rows, private_info[str(seed)] = run_seed(loaded, task, seed, args, ctx)
        rows += seed_rows
        acc = {
            r["method"] + ("" if r["epsilon"] is None else f"@{r['epsilon']:g}"): round(r["accuracy"], 3)
            for r in seed_rows
            if r["epsilon"] in (None, 1.0)
        }
        log(f"  seed {seed}: {time.perf_counter() - t0:.1f}s {acc}")
    return rows, private_info


def result_config(args, tasks, seeds, epsilons, shared) -> dict:
    return {
        "tasks": [t.name for t in tasks],
        "seeds": seeds,
        "epsilons": epsilons,
        "delta": DELTA,
        "records": args.records,
        "shots": args.shots,
        "test_queries": args.test_queries,
        "public_records": args.public_records,
        "public_seed": PUBLIC_SEED,
        "reinforce_steps": args.reinforce_steps,
        "private_k": PRIVATE_K,
        "selection_fraction": args.selection_fraction,
        "composition": "sequential",
        "private_pool": shared["private_pool_spec"],
        "private_clip_norms": {str(ly): c for ly, c in shared["private_clip"].items()},
        "private_l2_sensitivity": shared["private_sensitivity"],
        "noise_sampler": shared["sampler"].name,
        "torch_threads": args.threads,
        "batch_size": args.batch_size,
    }


def result_body(all_rows, seeds, task_out, cross, overlap, shared, args) -> dict:
    defaults = shared["defaults"]
    return {
        "method_labels": METHOD_LABELS,
        "shipped_defaults": {
            "heads": defaults["heads"],
            "l2_clip_norm": defaults["l2_clip_norm"],
            "selection_method": defaults.get("selection", {}).get("method"),
        },
        "summary": summarise(all_rows, seeds),
        "private_overlap": overlap,
        "tasks": task_out,
        "rows": all_rows,
        "cross_check": cross,
        "plan_calibration_seconds": shared["plans"].seconds,
        "machine": (
            f"{platform.machine()}, torch {torch.__version__} CPU, {args.threads} thread(s), "
            "shared 2-core host"
        ),
    }


def main(argv=None) -> None:
    args = parse_args(argv)
    if args.markdown_only:
        args.out.with_suffix(".md").write_text(markdown(json.loads(args.out.read_text())))
        return
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    started = time.perf_counter()
    tasks = [get_task(t) for t in args.tasks.split(",")]
    seeds = [int(s) for s in args.seeds.split(",")]
    epsilons = [float(e) for e in args.epsilons.split(",")]
    loaded = load_model("embedded")
    shared = shared_setup(loaded, args, epsilons)
    all_rows, task_out, cross = [], {}, None
    for task in tasks:
        log(f"task {task.name}: public selection")
        ctx, info = task_context(loaded, task, args, shared)
        rows, private_info = run_task(loaded, task, seeds, args, ctx)
        all_rows += rows
        task_out[task.name] = task_summary(task, ctx, info, private_info, rows, args.records // args.shots)
        if task is tasks[0] and not args.no_cross_check:
            cross = cross_check(loaded, task, args, ctx)
            log(f"  cross-check: {cross}")
    overlap = {
        str(e): float(
            np.mean(
                [
                    r["overlap_with_exact"]
                    for r in all_rows
                    if r["method"] == "d-private" and r["epsilon"] == e
                ]
            )
        )
        for e in epsilons
    }
    command = ".venv/bin/python benchmarks/selection_comparison.py" + (
        " " + " ".join(sys.argv[1:]) if argv is None and sys.argv[1:] else ""
    )
    result = {
        "command": command,
        "config": result_config(args, tasks, seeds, epsilons, shared),
        **result_body(all_rows, seeds, task_out, cross, overlap, shared, args),
        "seconds": time.perf_counter() - started,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    args.out.with_suffix(".md").write_text(markdown(result))
    log(f"wrote {args.out} and {args.out.with_suffix('.md')} in {result['seconds']:.0f}s")
    print(markdown(result))


if __name__ == "__main__":
    main()
