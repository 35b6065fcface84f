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

``--split dev`` runs the DEV set instead (benchmarks/private_dev.py: trained tables outside the
evaluation suite, seeds 100+, public heads and C from the package's public selection on each dev
task's public sample): every choice of the private path is made there. ``--clip-configs``
(``utility:fraction[:tolerance]``, comma-separated) runs the private-C variants once per clip
configuration; ``--variants`` picks the variants (default: all).

Usage: .venv/bin/python benchmarks/private_only.py [--split held-out|dev] [--tasks a,b]
       [--seeds 0,1,2] [--records 2048] [--epsilon 1] [--select-k 8] [--clip-configs quantile:0.1]
       [--variants ...] [--out benchmarks/results/private_only.json]
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import torch

from dpmtv.data.prompts import zero_shot_prompts
from dpmtv.demo.config import load_defaults
from dpmtv.demo.recognition import run_ceiling
from dpmtv.embedded.generator import get_task, task_suite
from dpmtv.embedded.suite import first_token_correct, task_codes, task_records
from dpmtv.embedded.world import combo_index
from dpmtv.forward.executor import LocalExecutor
from dpmtv.heads import HeadSet
from dpmtv.inference import vector_patches
from dpmtv.models.loading import load_model
from dpmtv.pipeline.build import BuildSettings, PrivateSelectionSettings, build_task_vector
from dpmtv.pipeline.settings import PrivateClipSettings
from dpmtv.pipeline.tasks import CenteredRows
from dpmtv.selection.candidates import CandidateUtilities

sys.path.insert(0, str(Path(__file__).parent))
from private_dev import DEV_SEEDS, dev_public_defaults, dev_task_names  # noqa: E402

VARIANTS = (
    "public heads, public C",
    "public heads, private C",
    "private heads, given C",
    "private heads, private C",
)


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--split", choices=("held-out", "dev"), default="held-out")
    p.add_argument("--tasks", default=None, help="default: every held-out predicate / every dev task")
    p.add_argument("--seeds", default=None, help="default: 0,1,2 (held-out) / the dev seeds")
    p.add_argument("--records", type=int, default=2048)
    p.add_argument("--shots", type=int, default=8)
    p.add_argument("--test-queries", type=int, default=64)
    p.add_argument("--epsilon", type=float, default=1.0)
    p.add_argument("--select-k", type=int, default=8)
    p.add_argument("--clip-configs", default="quantile:0.1", help="utility:fraction[:tolerance],...")
    p.add_argument(
        "--selection-configs",
        default="votes:0.5",
        help="private heads: votes:fraction | candidates:utility:fraction[:list] | exact:utility[:list]",
    )
    p.add_argument("--variants", default=";".join(VARIANTS), help="';'-separated subset of the variants")
    p.add_argument(
        "--repeats", type=int, default=1, help="private-C builds per clip configuration (fresh noise each)"
    )
    p.add_argument(
        "--reuse-rows",
        action="store_true",
        help="private-C builds of one (task, seed) share one extraction of the release chunks' rows "
        "(one partition; a paired design: only the clip round and the noise differ); the "
        "records' validation pass also runs once per (task, seed)",
    )
    p.add_argument("--out", type=Path, default=Path("benchmarks/results/private_only.json"))
    p.add_argument(
        "--merge",
        default=None,
        help="comma-separated results files: write their union to --out (summary recomputed; a "
        "(task, seed) in several is taken from the last listed) and exit",
    )
    args = p.parse_args(argv)
    if args.split == "dev":
        args.tasks = args.tasks or ",".join(dev_task_names())
        args.seeds = args.seeds or ",".join(map(str, DEV_SEEDS))
    else:
        args.tasks = args.tasks or ",".join(t.name for t in task_suite() if t.is_predicate and t.held_out)
        args.seeds = args.seeds or "0,1,2"
    args.clip = [_clip_config(text) for text in args.clip_configs.split(",")]
    args.selection = [_selection_config(text, args.select_k) for text in args.selection_configs.split(",")]
    return args


def _clip_config(text: str) -> PrivateClipSettings:
    utility, fraction, *rest = text.split(":")
    tolerance = {"tolerance": float(rest[0])} if rest else {}
    return PrivateClipSettings(utility=utility, epsilon_fraction=float(fraction), **tolerance)


def clip_label(clip: PrivateClipSettings) -> str:
    tolerance = f", w={clip.tolerance:g}" if clip.utility == "log-loss" else ""
    return f" [{clip.utility}{tolerance}, {clip.epsilon_fraction:g}ε]"


def _selection_config(text: str, k: int) -> PrivateSelectionSettings | str:
    """``votes:fraction``, ``candidates:utility:fraction[:list]`` or ``exact:utility[:list]`` (the
    exact, non-private argmax of the same utilities: an ablation, never a build option)."""
    kind, *rest = text.split(":")
    if kind == "votes":
        return PrivateSelectionSettings(k=k, pool="all", selection_fraction=float(rest[0]))
    if kind == "candidates":
        extra = {"candidates": rest[2]} if len(rest) > 2 else {}
        extra |= {"composition": rest[3]} if len(rest) > 3 else {}
        return PrivateSelectionSettings(
            k=k, method="candidates", utility=rest[0], selection_fraction=float(rest[1]), **extra
        )
    if kind == "exact":
        if rest[0].startswith("noisy-") and len(rest) < 3:
            raise SystemExit(f"{text!r}: exact:noisy-utility:fraction:list[:composition] (as its build)")
        return text
    raise SystemExit(f"unknown selection config {text!r}")


def selection_label(selection) -> str:
    if isinstance(selection, str):
        return f" [{selection}, no noise]"
    if selection.method == "votes":
        return f" [votes top-{selection.k}, {selection.selection_fraction:g}ε]"
    if selection.composition == "parallel":
        return f" [{selection.candidates} by {selection.utility}, parallel halves]"
    return f" [{selection.candidates} by {selection.utility}, {selection.selection_fraction:g}ε]"


def noisy_exact_label(spec: str) -> str:
    """The label of the build whose (noise-aware) utilities the ablation ``spec`` takes the exact
    argmax of: ``exact:rest`` → the build ``candidates:rest``."""
    return selection_label(_selection_config("candidates:" + spec.split(":", 1)[1], 1))


def run_list(args) -> list[tuple[str, PrivateClipSettings | None, object]]:
    """(variant name, clip settings or None, selection settings / exact ablation / None) for
    every build of one (task, seed)."""
    out: list[tuple[str, PrivateClipSettings | None, object]] = []
    for variant in args.variants.split(";"):
        heads = args.selection if variant.startswith("private heads") else [None]
        clips = args.clip if variant.endswith("private C") else [None]
        for selection in heads:
            for clip in clips:
                name = variant
                if selection is not None and len(args.selection) > 1:
                    name += selection_label(selection)
                if clip is not None and len(args.clip) > 1:
                    name += clip_label(clip)
                out += [(name, clip, selection)] * (args.repeats if clip or selection else 1)
    return out


def settings_for(
    args, defaults: dict, public_clip: tuple[float, ...], private_clip, selection
) -> BuildSettings:
    clip = defaults["l2_clip_norm"] if isinstance(selection, PrivateSelectionSettings) else public_clip
    return BuildSettings(
        epsilon=args.epsilon,
        delta=1e-5,
        l2_clip_norm=(1.0,) if private_clip is not None else tuple(clip),
        shots_per_chunk=args.shots,
        progress=False,
        private_selection=selection if isinstance(selection, PrivateSelectionSettings) else None,
        private_clip=private_clip,
    )


def exact_candidate(loaded, private: list, spec: str, shots: int, executor=None) -> HeadSet:
    """The ablation: the candidate with the largest EXACT utility total over the private chunks
    (no noise, no privacy), for ``exact:utility[:list]``: with ``--reuse-rows`` the very
    utilities the noisy builds of this (task, seed) saw, else over consecutive records."""
    from dpmtv.forward.prompt_budget import resolve_max_prompt_tokens
    from dpmtv.privacy import Partition
    from dpmtv.selection.candidates import CandidateUtilities, candidate_head_sets, candidate_totals

    _, utility, *rest = spec.split(":")
    if utility.startswith("noisy-"):  # the build's own noisy utilities (its selection chunks)
        if not isinstance(executor, RowCache) or noisy_exact_label(spec) not in executor.by_label:
            raise SystemExit(
                f"{spec!r} needs --reuse-rows and its build candidates:{spec.split(':', 1)[1]} first"
            )
        task, utilities = executor.by_label[noisy_exact_label(spec)]
        return task.candidates[
            int(np.argmax(candidate_totals(utilities, num_candidates=len(task.candidates))))
        ]
    rest = rest[1:] if len(rest) > 1 else rest  # exact:utility:fraction:list: the fraction is unused
    geometry = loaded.adapter.geometry
    pool = HeadSet.of((layer, h) for layer in range(geometry.num_layers) for h in range(geometry.num_heads))
    candidates = tuple(candidate_head_sets(rest[0] if rest else "layer-subsets", pool))
    task = CandidateUtilities(candidates, utility, resolve_max_prompt_tokens(loaded.adapter, None), shots)
    chunks = tuple(np.arange(i, i + shots) for i in range(0, len(private) - shots + 1, shots))
    partition = Partition(chunks=chunks, num_unused=0)
    utilities = (executor or LocalExecutor()).run(loaded, private, partition, task, progress=False)
    return candidates[int(np.argmax(candidate_totals(utilities, num_candidates=len(candidates))))]


def deciding_mask(task, ceiling, seed: int, n: int) -> np.ndarray:
    """Which of the first ``n`` test queries of ``seed`` lie in a deciding cell (as
    dpmtv.demo.recognition had it before the demo moved to eval's benchmark)."""
    return np.isin(combo_index(task_codes(task, n, seed=seed, split="test")), ceiling.deciding_rows)


def run_task_seed(loaded, name: str, seed: int, args, defaults: dict, ceiling) -> list[dict]:
    task = get_task(name)
    chosen = defaults["per_task"][name]
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
                "clip_multiplier": (p.clip_norm_selection or {}).get("multiplier"),
                "head_layers": sorted(vector.heads.layers),
            }
        return out

    rows = [row("zero-shot", first_token_correct(loaded.adapter, queries, answers))]
    executor = RowCache() if args.reuse_rows else None
    exact: dict[str, HeadSet] = {}
    for variant, clip, selection in run_list(args):
        settings = settings_for(args, defaults, tuple(chosen["l2_clip_norm"]), clip, selection)
        build_heads = None if settings.private_selection is not None else heads
        if isinstance(selection, str):  # the exact-argmax ablation: its heads given as public
            if selection not in exact:
                exact[selection] = exact_candidate(loaded, private, selection, args.shots, executor)
            build_heads = exact[selection]
            if clip is None:  # given C: the shared generic norms of the candidate's layers
                generic = dict(enumerate(defaults["l2_clip_norm"]))
                settings = replace(settings, l2_clip_norm=tuple(generic[ly] for ly in build_heads.layers))
        vector = build_task_vector(loaded, private, build_heads, settings, executor=executor).vector
        if isinstance(executor, RowCache) and executor.last is not None:
            executor.by_label[selection_label(selection)], executor.last = executor.last, None
        correct = first_token_correct(loaded.adapter, queries, answers, patches=vector_patches(vector))
        rows.append(row(variant, correct, vector))
    return rows


class RowCache(LocalExecutor):
    """A local executor that extracts the release chunks' centered rows once per head set (and
    computes the candidate choice's chunk utilities once per utility) and hands the same results
    to every later build of the (task, seed) (``--reuse-rows``)."""

    def __init__(self):
        self._rows: dict = {}
        self.last = None  # the latest build's (candidate task, utilities)
        self.by_label: dict = {}  # selection label -> (task, utilities), for the exact ablations

    def run(self, loaded, records, partition, task, *, progress: bool = False):
        if isinstance(task, CandidateUtilities):  # the candidate choice's utilities, once per kind
            key = (
                task.utility,
                tuple(tuple(c.pairs) for c in task.candidates),
                task.noise_std,
                len(partition.chunks),
            )
        elif isinstance(task, CenteredRows):  # per head set and number of chunks (a parallel half)
            key = (tuple(task.job.heads.pairs), len(partition.chunks))
        else:
            return super().run(loaded, records, partition, task, progress=progress)
        if key not in self._rows:
            self._rows[key] = super().run(loaded, records, partition, task, progress=progress)
        if isinstance(task, CandidateUtilities):
            self.last = (task, self._rows[key])
        return self._rows[key]


def summarise(rows: list[dict]) -> dict:
    # the variants in the order they ran
    names = list(dict.fromkeys(r["variant"] for r in rows))
    """Per variant: mean over tasks per seed, then mean and 95% t-interval over seeds; pooled
    deciding-cell accuracy over every (task, seed)."""
    from scipy import stats

    out = {}
    for variant in names:
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
    base = out.get("public heads, public C", {}).get("accuracy")
    for variant in names:
        if base and variant != "zero-shot":
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


def _validate_once() -> None:
    """``--reuse-rows``: the build's validation pass (every record's prompt encoded) runs once per
    records list and head pool; its outcome does not depend on the clip configuration."""
    import dpmtv.pipeline.build as build

    validate, seen = build.validate_build_inputs, set()

    def once(adapter, records, heads, settings):
        key = (id(records), tuple(heads.pairs), settings.private_selection is not None)
        if key not in seen:
            validate(adapter, records, heads, settings)
            seen.add(key)

    build.validate_build_inputs = once


def merge(args) -> dict:
    """The union of runs over (task, seed)s, with their commands (``--merge``)."""
    parts = [json.loads(Path(f).read_text()) for f in args.merge.split(",")]
    owner = {(r["task"], r["seed"]): i for i, part in enumerate(parts) for r in part["rows"]}
    # a (task, seed) in several runs (a run stopped after its share) is taken from the last one
    rows = [r for i, part in enumerate(parts) for r in part["rows"] if owner[(r["task"], r["seed"])] == i]
    result = {
        "merged_from": [{"file": f, "command": part["command"], "seconds": part["seconds"]}
                        for f, part in zip(args.merge.split(","), parts, strict=True)],
        "summary": summarise(rows),
        "rows": rows,
    }  # fmt: skip
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    return result


def main(argv=None) -> dict:
    args = parse_args(argv)
    if args.merge:
        return merge(args)
    if args.reuse_rows:
        _validate_once()
    torch.set_num_threads(1)
    started = time.perf_counter()
    loaded = load_model("embedded")
    defaults = dev_public_defaults(loaded) if args.split == "dev" else load_defaults()
    seeds = [int(s) for s in args.seeds.split(",")]
    rows: list[dict] = []
    for name in args.tasks.split(","):
        ceiling = run_ceiling(get_task(name), seeds, args.test_queries)
        for seed in seeds:
            rows += run_task_seed(loaded, name, seed, args, defaults, ceiling)
            result = _write(args, rows, started)  # after every (task, seed): a cut run keeps its rows
    for variant, cell in result["summary"].items():
        print(
            f"{variant:56s} {cell['accuracy']:.3f}  deciding {cell['deciding_accuracy']} "
            f"(n = {cell['deciding_count']})"
        )
    return result


if __name__ == "__main__":
    main()
