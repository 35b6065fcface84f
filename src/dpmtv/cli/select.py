"""``dpmtv select``: public head selection, written as a JSON file that ``--heads`` reads."""

from __future__ import annotations

from pathlib import Path

import click
from rich.markup import escape
from rich.table import Table

from dpmtv.cli._common import console, model_options
from dpmtv.data.prompts import DEFAULT_QUERY_QUESTION
from dpmtv.errors import ParameterError


@click.command(name="select")
@model_options
@click.option(
    "--public-data",
    "data_path",
    required=True,
    type=click.Path(path_type=Path),
    help="PUBLIC records in the downstream format (.jsonl, .csv or a saved datasets folder). "
    "Never pass private data here: selection on it is not private.",
)
@click.option(
    "--method",
    type=click.Choice(["reinforce", "greedy", "scored"]),
    default="greedy",
    show_default=True,
    help="reinforce: MTV's policy-gradient search (slowest). greedy: forward selection. "
    "scored: top-k by single-head patching effect (cheapest; misses heads that only work together).",
)
@click.option("--out", type=click.Path(path_type=Path), required=True, help="Output JSON (heads + how).")
@click.option("--shots", type=int, default=8, show_default=True, help="Records per public many-shot prompt.")
@click.option(
    "--k", type=int, help="scored: heads to keep (default 10). greedy: maximum heads (default none)."
)
@click.option("--steps", type=int, default=600, show_default=True, help="reinforce: policy-gradient steps.")
@click.option("--seed", type=int, default=0, show_default=True, help="Seeds the data split and the search.")
@click.option(
    "--estimate",
    type=click.Choice(["exact", "attribution"]),
    default="exact",
    show_default=True,
    help="scored: exact single-head patching, or its attribution-patching (gradient) estimate.",
)
@click.option(
    "--metric",
    type=click.Choice(["logprob", "accuracy"]),
    default="logprob",
    show_default=True,
    help="What greedy, scored and the candidate comparison maximise on the public queries.",
)
@click.option(
    "--pool", "pool_spec", default="all", show_default=True, help="Candidate heads (a --heads spec)."
)
@click.option(
    "--compare/--no-compare",
    default=True,
    show_default=True,
    help="Let the method's heads compete with whole-layer blocks and all heads on public dev queries.",
)
@click.option("--num-dev", type=int, help="Held-out public dev queries (default 20 % of the records).")
@click.option(
    "--query",
    default="record",
    show_default=True,
    help="Prompt format of the public means; use the build's --query.",
)
@click.option("--query-question", default=DEFAULT_QUERY_QUESTION, show_default=True)
@click.option("--batch-size", type=int, default=4, show_default=True)
@click.option("--quiet", is_flag=True, help="No progress bar.")
def command(
    model_path,
    data_path,
    method,
    out,
    shots,
    k,
    steps,
    seed,
    estimate,
    metric,
    pool_spec,
    compare,
    num_dev,
    query,
    query_question,
    batch_size,
    dtype,
    device,
    quiet,
):
    """Select heads on PUBLIC data (no privacy cost) and save them for `build --heads FILE`."""
    from dpmtv.data import load_records
    from dpmtv.heads import parse_head_spec
    from dpmtv.models.loading import load_model
    from dpmtv.selection import select_public

    records = load_records(data_path)
    loaded = load_model(model_path, dtype=dtype, device=device)
    pool = parse_head_spec(pool_spec, loaded.adapter.geometry)
    _check_k(k, pool, pool_spec, loaded.adapter.geometry)
    result = select_public(
        loaded,
        records,
        method=method,
        shots=shots,
        k=k,
        steps=steps,
        seed=seed,
        pool=pool,
        compare_candidates=compare,
        metric=metric,
        estimate=estimate,
        num_dev=num_dev,
        query=query,
        query_question=query_question,
        batch_size=batch_size,
        progress=not quiet,
    )
    path = result.save(out)
    _print_summary(result, path)


def _check_k(k, pool, pool_spec, geometry) -> None:
    """--k against the candidate pool, before the public means are computed."""
    if k is None:
        return
    if k < 1:
        raise ParameterError(f"--k must be at least 1, got {k}")
    if k > len(pool):
        raise ParameterError(
            f"--k {k} is more than the {len(pool)} candidate heads of --pool {pool_spec!r} (the model "
            f"has {geometry.num_layers} layers × {geometry.num_heads} heads); choose --k <= {len(pool)}"
        )


def _print_summary(result, path) -> None:
    table = Table(title=f"head selection {path}", show_header=False)
    heads = ", ".join(f"{layer}.{head}" for layer, head in result.heads.pairs)
    method = result.method.removesuffix("+best-of")
    rows = [("method", method)]
    if result.chosen is not None:
        rows.append(("--compare", _comparison_text(result, method)))
    rows += [
        ("heads saved", f"{len(result.heads)}: {heads}"),
        (f"public dev {result.metric}", f"{result.dev_metric:.4g}"),
        ("time", f"{result.seconds:.1f} s"),
    ]
    for key, value in rows:
        table.add_row(key, escape(value))
    console.print(table)


def _comparison_text(result, method: str) -> str:
    """What --compare did: kept the method's heads, or replaced them with a candidate set."""
    scores = ", ".join(f"{name} {value:.4g}" for name, value in result.candidates.items())
    if result.chosen == method:
        return f"{method}'s heads kept: best on the public dev queries ({scores})"
    return (
        f"the candidate '{result.chosen}' beat {method}'s heads on the public dev queries ({scores}), "
        f"so the saved heads are '{result.chosen}', NOT {method}'s; --no-compare keeps {method}'s"
    )
