"""The chunk query on the DEV set (issue 24, item 3): the dev runs of
``benchmarks/embedded_selection_dev.py`` (per-task public selection, then zero-shot, ICL-16, MTV
and DP-MTV at ε = 1 on the dev tasks and seeds) with every chunk prompt read with ``--query
QUERY``: the public selection's chunk means and the runs' DP-MTV/MTV builds alike.

``record`` is what the demo does; ``blank`` reads all s records as demonstrations, then the
package's grey blank image (the query of a ``--query blank`` build). The demo and ``dpmtv eval``
have no query option: this harness swaps it in for the experiment (the two functions it wraps are
named below), so nothing here is a code path users run.

Usage: .venv/bin/python benchmarks/embedded_query_dev.py --checkpoint DIR --query blank --out FILE
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from pathlib import Path

import embedded_selection_dev as dev
import private_dev
import torch

import dpmtv.eval.methods as eval_methods
from dpmtv._atomic import write_text_atomically
from dpmtv.models.loading import load_model
from dpmtv.pipeline.settings import QueryKind


def use_query(query: str) -> None:
    """Every DP-MTV/MTV build of the runs (``eval.methods._dp_mtv_settings``) and every public
    chunk of the selection script (its ``chunk_prompt``) read their chunks with ``query``."""
    settings = eval_methods._dp_mtv_settings
    eval_methods._dp_mtv_settings = lambda ctx, seed: dataclasses.replace(
        settings(ctx, seed), query=QueryKind(query)
    )
    load_script = private_dev.selection_script

    def script():
        module = load_script()
        prompt = module.chunk_prompt
        module.chunk_prompt = lambda records, **kw: prompt(records, **{**kw, "query": query})
        return module

    dev.selection_script = script


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--checkpoint", default="embedded")
    parser.add_argument("--query", choices=("record", "blank"), required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--test-queries", type=int, default=128, help="per task and seed")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    use_query(args.query)
    loaded = load_model(args.checkpoint)
    tasks = dev.dev_tasks()
    started = time.time()
    result = dev.run_variant(loaded, tasks, dev.per_task_selection(loaded, tasks, 0.0), args.test_queries)
    record = {
        "command": "python " + " ".join(sys.argv),
        "dev_tasks": [t.name for t in tasks],
        "dev_seeds": list(dev.DEV_SEEDS),
        "settings": f"N = 2048, s = 8, ε = 1, δ = 1e-5, {args.test_queries} test queries per task and seed",
        "query": args.query,
        "seconds": round(time.time() - started, 1),
        **result,
    }
    write_text_atomically(args.out, json.dumps(record, indent=2) + "\n")
    for group in ("predicates", "label_maps"):
        for method, row in result[group].items():
            all_queries, deciding = row["accuracy"], row["deciding_accuracy"]
            print(f"{group:11s} {method:22s} all {all_queries:.3f}  deciding {deciding:.3f}")


if __name__ == "__main__":
    main()
