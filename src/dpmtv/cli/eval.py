from __future__ import annotations

from pathlib import Path

import click
from click.core import ParameterSource

from dpmtv.cli._common import console, err_console, float_list, model_options
from dpmtv.cli._config_file import config_options
from dpmtv.errors import ParameterError
from dpmtv.pipeline.defaults import DEFAULT_L2_CLIP_NORM, DEFAULT_SHOTS_PER_CHUNK


@click.command(name="eval")
@model_options
@click.option(
    "--benchmark",
    help="vizwiz, ok-vqa, flowers102, cub-200, dtd, vqa-rad, slake, pathvqa, embedded[:TASK or RULE] "
    "(e.g. embedded:is_green, embedded:map_colour, 'embedded:big and not red').",
)
@click.option(
    "--benchmark-root",
    type=click.Path(path_type=Path),
    help="Local copy of the benchmark in its published layout.",
)
@click.option(
    "--data",
    "data_path",
    type=click.Path(path_type=Path),
    help="Private demonstration records (with --eval-data).",
)
@click.option(
    "--eval-data",
    "eval_path",
    type=click.Path(path_type=Path),
    help="Query records with answers (with --data).",
)
@click.option(
    "--methods",
    default="zero-shot,dp-mtv,dp-icl",
    show_default=True,
    help="zero-shot, icl:K, mtv, dp-mtv, dp-icl[:S] (full partition), dp-icl:S:M (DP-ICL's "
    "Poisson-subsampled ensemble of M prompts per query).",
)
@click.option(
    "--epsilons",
    default="0.5,1,2,4,8",
    show_default=True,
    callback=float_list,
    help="ε values of the private methods.",
)
@click.option("--seeds", type=int, default=3, show_default=True, help="Number of seeds (0 … n−1).")
@click.option(
    "--delta",
    type=float,
    default=1e-5,
    show_default=True,
    help="δ of every private method; keep it below 1/N.",
)
@click.option(
    "--heads",
    "head_spec",
    help="Head set for mtv / dp-mtv — REQUIRED whenever --methods has mtv or dp-mtv (the default "
    "does): 'all', 'layers:A-B', 'heads:L.H,...', a JSON file (e.g. a selection saved by `dpmtv select`), "
    "or on the embedded benchmark 'public' (the task's public selection shipped with the model, with "
    "its clip norms) or 'shared' (the one set chosen on the seen tasks).",
)
@click.option(
    "--l2-clip-norm",
    default=f"{DEFAULT_L2_CLIP_NORM:g}",
    show_default=True,
    callback=float_list,
    help="DP-MTV per-layer clip norm(s) C, as for `dpmtv build` (same default).",
)
@click.option(
    "--shots-per-chunk",
    type=int,
    default=DEFAULT_SHOTS_PER_CHUNK,
    show_default=True,
    help="DP-MTV / MTV records per chunk s, as for `dpmtv build` (same default).",
)
@click.option(
    "--dp-icl-max-chunks",
    type=int,
    help="Cap on full-partition DP-ICL chunk prompts per query (default: all floor(N/S)); "
    "no amplification — dp-icl:S:M is DP-ICL's subsampled way to use fewer prompts.",
)
@click.option(
    "--dp-icl-sampling-rate",
    type=click.FloatRange(min=0, max=1, min_open=True),
    help="dp-icl:S:M's public Poisson rate q: each demonstration joins a query's sample with "
    "probability q (required for dp-icl:S:M; a public choice, never derived from the private N).",
)
@click.option(
    "--relation",
    "neighbouring_relation",
    type=click.Choice(["replace-one", "add-remove-one"]),
    default="replace-one",
    show_default=True,
    help="DP-MTV's neighbouring relation (dp-icl:S:M is add-remove-one; compare at one relation).",
)
@click.option(
    "--max-train", type=int, help="Demonstration pool size (episodes for classification benchmarks)."
)
@click.option("--max-queries", type=int, help="Number of queries (episodes for classification benchmarks).")
@click.option(
    "--split-seed",
    type=int,
    default=0,
    show_default=True,
    help="Seed of the pool/query subsets (fixed for a run).",
)
@click.option(
    "--max-new-tokens",
    type=click.IntRange(min=1),
    default=10,
    show_default=True,
    help="Tokens generated per answer (answers are scored after normalisation, docs/eval.md).",
)
@click.option(
    "--batch-size",
    type=click.IntRange(min=1),
    default=8,
    show_default=True,
    help="Prompts per forward pass for queries and public prompts (private chunks always run one per pass).",
)
@click.option(
    "--context-limit",
    "--max-prompt-tokens",
    "context_limit",
    type=int,
    help="Public token budget of every prompt (default: the model's position limit): icl:K and dp-icl "
    "keep their leading demonstrations that fit with room for --max-new-tokens; dp-mtv/mtv chunk "
    "prompts follow the build's rule (see `dpmtv build --help`). Private chunks are never batched.",
)
@click.option(
    "--non-private", is_flag=True, help="Allow the NON-PRIVATE baselines (mtv, icl:K; ε = ∞, labelled)."
)
@click.option("--out", type=click.Path(path_type=Path), required=True, help="Output folder.")
@click.option("--quiet", is_flag=True, help="No progress bars.")
@config_options
def command(**options):
    """Evaluate methods side by side: accuracy with CIs, privacy-utility and queries plots (docs/eval.md)."""
    from dpmtv.eval import EvalSettings, parse_methods, run_evaluation, write_report
    from dpmtv.eval.methods import check_non_private
    from dpmtv.models.loading import load_model

    o = options
    methods = parse_methods(o["methods"])
    check_non_private(methods, allow_non_private=o["non_private"])  # before any loading
    if o["head_spec"] is None and any(spec.kind in ("mtv", "dp-mtv") for spec in methods):
        raise click.UsageError(
            "--heads is required with mtv or dp-mtv in --methods: e.g. --heads layers:0-3, or a "
            "selection saved by `dpmtv select`"
        )
    if o["seeds"] < 1:
        raise ParameterError(f"--seeds must be >= 1, got {o['seeds']}")
    benchmark = _benchmark(o)
    heads, o["l2_clip_norm"] = _embedded_public_heads(o, benchmark)
    settings = EvalSettings(
        methods=methods,
        epsilons=tuple(o["epsilons"]),
        seeds=tuple(range(o["seeds"])),
        delta=o["delta"],
        l2_clip_norm=tuple(o["l2_clip_norm"]),
        shots_per_chunk=o["shots_per_chunk"],
        dp_icl_max_chunks=o["dp_icl_max_chunks"],
        dp_icl_sampling_rate=o["dp_icl_sampling_rate"],
        neighbouring_relation=o["neighbouring_relation"],
        max_new_tokens=o["max_new_tokens"],
        batch_size=o["batch_size"],
        allow_non_private=o["non_private"],
        context_limit=o["context_limit"],
        progress=not o["quiet"],
    )
    loaded = load_model(o["model_path"], dtype=o["dtype"], device=o["device"])
    results = run_evaluation(loaded, benchmark, settings, heads=heads, model_name=str(o["model_path"]))
    paths = write_report(results, o["out"])
    for run in results.runs:
        if run.details.get("note"):
            err_console.print(f"[yellow]note:[/] {run.method} seed {run.seed}: {run.details['note']}")
    console.print(paths["report"].read_text(encoding="utf-8"), markup=False, highlight=False, soft_wrap=True)
    console.print(f"wrote {', '.join(str(p) for p in paths.values())}", highlight=False)


def _embedded_public_heads(o, benchmark):
    """``--heads public`` / ``--heads shared`` on the embedded benchmark: the task's head set and
    per-layer clip norms chosen on public data (shipped with the model), or the shared set."""
    spec = o["head_spec"]
    if spec not in ("public", "shared"):
        return spec, o["l2_clip_norm"]
    from dpmtv.eval.benchmarks.embedded import public_selection
    from dpmtv.heads import HeadSet

    where = f"--heads {spec}"
    if "ceiling" not in benchmark.details:
        raise ParameterError(
            f"{where} names the embedded model's public selection: use it with --benchmark embedded[:TASK]"
        )
    if spec == "public" and benchmark.details["group"] == "rules":
        raise ParameterError(
            f"{where}: no public selection ships for the typed rule {benchmark.details['task']!r}; "
            "use --heads shared, or a selection saved by `dpmtv select` on a public sample of it"
        )
    if click.get_current_context().get_parameter_source("l2_clip_norm") is not ParameterSource.DEFAULT:
        raise ParameterError(f"{where} brings its own per-layer clip norms; leave out --l2-clip-norm")
    pairs, clip = public_selection(benchmark.details["task"], shared=spec == "shared")
    return HeadSet.of(map(tuple, pairs)), list(clip)


def _benchmark(o):
    from dpmtv.eval import LoadOptions, load_benchmark, load_record_files

    load = LoadOptions(max_train=o["max_train"], max_test=o["max_queries"], split_seed=o["split_seed"])
    if o["benchmark"] and (o["data_path"] or o["eval_path"]):
        raise ParameterError("give either --benchmark NAME or --data FILE --eval-data FILE, not both")
    if o["benchmark"]:
        return load_benchmark(o["benchmark"], root=o["benchmark_root"], options=load)
    if o["data_path"] and o["eval_path"]:
        return load_record_files(o["data_path"], o["eval_path"], load)
    raise ParameterError(
        "give --benchmark NAME (with --benchmark-root DIR) or --data FILE and --eval-data FILE"
    )
