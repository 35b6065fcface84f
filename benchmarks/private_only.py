"""The private-only path on the embedded model (issue 28): DP-MTV accuracy with heads and clip
norms chosen from the private data alone, beside public selection and a C chosen on public data.

Every variant is a real ``build_task_vector`` call (secure OpenDP noise, the build's own
extraction, accounting and artifact claim), then the released vector answers the task's test
queries (greedy first answer token; all queries and the deciding-cell queries of
``dpmtv demo``'s recognition measure). Per held-out task and seed, N private records,
s records per chunk, δ = 1e-5, replace-one, at one total ε:

- ``public heads, public C``: the task's shipped public selection (heads and per-layer C from its
  public sample, ``dpmtv_defaults.json``), the demo's DP-MTV;
- ``public heads, private C``: the same heads, ``--l2-clip-norm private`` (ε_clip = fraction·ε);
- ``private heads, given C``: ``--heads-from private --select-k K`` (noisy top-k of the chunks'
  votes, ε_sel = 0.5·ε), C the shipped generic per-layer norms over the pool's layers;
- ``private heads, private C``: ``--heads-from private`` and ``--l2-clip-norm private``: the
  private-only path (no public data at all);

and zero-shot for reference. Test queries and private records come from the demo's seeds (the
final numbers; nothing here was tuned on them).

Usage: .venv/bin/python benchmarks/private_only.py [--tasks a,b] [--seeds 0,1,2]
       [--records 2048] [--epsilon 1] [--select-k 8] [--out benchmarks/results/private_only.json]
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
import time
from pathlib import Path

import numpy as np
import torch

from dpmtv.demo.config import load_defaults
from dpmtv.demo.recognition import deciding_mask, run_ceiling
from dpmtv.embedded.generator import get_task, task_suite
from dpmtv.embedded.suite import first_token_correct, task_records
from dpmtv.heads import HeadSet
from dpmtv.models.loading import load_model
from dpmtv.pipeline.build import BuildSettings, PrivateSelectionSettings, build_task_vector
from dpmtv.pipeline.settings import PrivateClipSettings
from dpmtv.prompts import zero_shot_prompts

VARIANTS = (
    "public heads, public C",
    "public heads, private C",
    "private heads, given C",
    "private heads, private C",
)


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    held_out = ",".join(t.name for t in task_suite() if t.is_predicate and t.held_out)
    p.add_argument("--tasks", default=held_out, help="default: every held-out predicate of the suite")
    p.add_argument("--seeds", default="0,1,2")
    p.add_argument("--records", type=int, default=2048)
    p.add_argument("--shots", type=int, default=8)
    p.add_argument("--test-queries", type=int, default=64)
    p.add_argument("--epsilon", type=float, default=1.0)
    p.add_argument("--select-k", type=int, default=8)
    p.add_argument("--clip-epsilon-fraction", type=float, default=0.1)
    p.add_argument("--out", type=Path, default=Path("benchmarks/results/private_only.json"))
    return p.parse_args(argv)


def settings_for(variant: str, args, defaults: dict, public_clip: tuple[float, ...]) -> BuildSettings:
    private_heads, private_clip = variant.startswith("private heads"), variant.endswith("private C")
    clip = defaults["l2_clip_norm"] if private_heads else public_clip
    return BuildSettings(
        epsilon=args.epsilon,
        delta=1e-5,
        l2_clip_norm=(1.0,) if private_clip else tuple(clip),
        shots_per_chunk=args.shots,
        progress=False,
        private_selection=PrivateSelectionSettings(k=args.select_k, pool="all") if private_heads else None,
        private_clip=PrivateClipSettings(epsilon_fraction=args.clip_epsilon_fraction)
        if private_clip
        else None,
    )


def run_task_seed(loaded, name: str, seed: int, args, defaults: dict, ceiling) -> list[dict]:
    task = get_task(name)
    chosen = defaults["per_task"].get(name, defaults)
    heads = HeadSet.of(map(tuple, chosen["heads"]))
    private = task_records(task, args.records, seed=seed, split="private")
    test = task_records(task, args.test_queries, seed=seed, split="test")
    answers, queries = [r.answer for r in test], zero_shot_prompts(test)
    mask = deciding_mask(task, ceiling, seed, args.test_queries)

    def row(variant: str, correct: np.ndarray, vector=None) -> dict:
        out = {
            "task": name,
            "seed": seed,
            "variant": variant,
            "accuracy": float(correct.mean()),
            "deciding_accuracy": float(correct[mask].mean()) if mask.any() else None,
            "deciding_count": int(mask.sum()),
        }
        if vector is not None:
            p = vector.metadata.privacy
            out |= {
                "heads": len(vector.heads.pairs),
                "l2_clip_norm": p.l2_clip_norm,
                "epsilon_spent": p.epsilon_spent,
            }
        return out

    rows = [row("zero-shot", first_token_correct(loaded.adapter, queries, answers))]
    for variant in VARIANTS:
        settings = settings_for(variant, args, defaults, tuple(chosen["l2_clip_norm"]))
        build_heads = None if settings.private_selection is not None else heads
        vector = build_task_vector(loaded, private, build_heads, settings).vector
        correct = first_token_correct(loaded.adapter, queries, answers, patches=vector.layer_patches())
        rows.append(row(variant, correct, vector))
    return rows


def summarise(rows: list[dict]) -> dict:
    """Per variant: mean over tasks per seed, then mean and 95% t-interval over seeds; pooled
    deciding-cell accuracy over every (task, seed)."""
    from scipy import stats

    out = {}
    for variant in ("zero-shot", *VARIANTS):
        mine = [r for r in rows if r["variant"] == variant]
        per_seed = [
            np.mean([r["accuracy"] for r in mine if r["seed"] == s])
            for s in sorted({r["seed"] for r in mine})
        ]
        half = (
            float(stats.t.ppf(0.975, len(per_seed) - 1) * np.std(per_seed, ddof=1) / np.sqrt(len(per_seed)))
            if len(per_seed) > 1
            else None
        )
        hits = sum((r["deciding_accuracy"] or 0.0) * r["deciding_count"] for r in mine)
        count = sum(r["deciding_count"] for r in mine)
        out[variant] = {
            "accuracy": float(np.mean(per_seed)),
            "accuracy_ci95_half_width": half,
            "deciding_accuracy": hits / count if count else None,
            "deciding_count": count,
        }
    base = out["public heads, public C"]["accuracy"]
    for variant in VARIANTS:
        out[variant]["ratio_to_public_heads_public_C"] = out[variant]["accuracy"] / base
    return out


def _write(args, rows: list[dict], started: float) -> dict:
    result = {
        "command": " ".join(shlex.quote(a) for a in [sys.executable, *sys.argv]),
        "args": {k: str(v) for k, v in vars(args).items()},
        "seconds": round(time.perf_counter() - started, 1),
        "summary": summarise(rows),
        "rows": rows,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    return result


def main(argv=None) -> dict:
    args = parse_args(argv)
    torch.set_num_threads(1)
    started = time.perf_counter()
    loaded, defaults = load_model("embedded"), load_defaults()
    seeds = [int(s) for s in args.seeds.split(",")]
    rows: list[dict] = []
    for name in args.tasks.split(","):
        ceiling = run_ceiling(get_task(name), seeds, args.test_queries)
        for seed in seeds:
            rows += run_task_seed(loaded, name, seed, args, defaults, ceiling)
            result = _write(args, rows, started)  # after every (task, seed): a cut run keeps its rows
    for variant, cell in result["summary"].items():
        print(
            f"{variant:28s} {cell['accuracy']:.3f}  deciding {cell['deciding_accuracy']} "
            f"(n = {cell['deciding_count']})"
        )
    return result


if __name__ == "__main__":
    main()
