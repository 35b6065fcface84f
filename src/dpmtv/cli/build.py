from __future__ import annotations

import math
from pathlib import Path

import click

from dpmtv.cli._common import err_console, float_list, model_options, print_vector_summary
from dpmtv.cli.budget import ledger_option, resolve_build_ledger
from dpmtv.errors import ParameterError


@click.command(name="build")
@model_options
@click.option(
    "--data",
    "data_path",
    required=True,
    type=click.Path(path_type=Path),
    help="Private records: .jsonl, .csv, or a saved datasets folder.",
)
@click.option(
    "--heads",
    "head_spec",
    help="'all', 'layers:A-B', 'heads:L.H,...' or a JSON file of [layer, head] pairs.",
)
@click.option(
    "--heads-from",
    help="Select heads instead of --heads: 'public:FILE' (public selection on public records, no "
    "privacy cost), 'private' (private selection on the private chunks, composed into the budget; "
    "see --select-k) or a saved selection JSON from `dpmtv select`.",
)
@click.option(
    "--select-k", type=int, default=10, show_default=True, help="Heads picked by private selection."
)
@click.option(
    "--select-method",
    type=click.Choice(["greedy", "reinforce", "scored"]),
    default="greedy",
    show_default=True,
    help="Public selection method (with --heads-from public:FILE).",
)
@click.option(
    "--selection-fraction",
    type=float,
    default=0.5,
    show_default=True,
    help="Private selection, sequential: the share of ε spent on selection; σ of the release is "
    "calibrated so the composition meets the total (ε, δ).",
)
@click.option(
    "--selection-composition",
    type=click.Choice(["sequential", "parallel"]),
    default="sequential",
    show_default=True,
    help="Private selection: 'sequential' runs selection and release on all chunks and splits the "
    "budget; 'parallel' runs them on disjoint halves of the chunks at the full budget each — no "
    "split, but each half has m/2 chunks (fewer votes, twice the release sensitivity).",
)
@click.option("--select-pool", default="all", show_default=True, help="Public candidate heads for selection.")
@click.option("--epsilon", type=float, help="Privacy budget ε of the build (> 0).")
@click.option("--delta", type=float, default=1e-5, show_default=True, help="δ in (0, 1); keep it below 1/N.")
@click.option(
    "--l2-clip-norm",
    callback=float_list,
    required=True,
    help="Per-layer L2 clip norm C: one value, or one per released layer (comma-separated).",
)
@click.option(
    "--shots-per-chunk",
    type=int,
    required=True,
    help="Records per chunk s; m = floor(N/s) chunks. With --query record, s-1 are demonstrations.",
)
@click.option(
    "--out",
    type=click.Path(path_type=Path),
    required=True,
    help="Output .safetensors artifact (written atomically).",
)
@click.option(
    "--neighbouring-relation",
    type=click.Choice(["replace-one", "add-remove-one"]),
    default="replace-one",
    show_default=True,
    help="replace-one: N is public. add-remove-one: needs record ids and --num-chunks.",
)
@click.option(
    "--num-chunks", type=int, help="Public, fixed m (required for add-remove-one and --privacy-unit user)."
)
@click.option(
    "--privacy-unit",
    type=click.Choice(["record", "user"]),
    default="record",
    show_default=True,
    help="record: the guarantee is per record. user: per user — records need 'user_id', each user's "
    "records go to one chunk (keyed hash, fresh key per build) and are capped at "
    "--max-records-per-user (the excess is dropped, with a count shown); needs --num-chunks.",
)
@click.option(
    "--max-records-per-user", type=int, help="Public cap on a user's records (--privacy-unit user)."
)
@click.option(
    "--dataset",
    help="Charge this build to the named dataset budget in the ledger (see `dpmtv budget`); the "
    "charge is taken just before noise is drawn, and a build that would exceed it is refused.",
)
@ledger_option
@click.option(
    "--query",
    default="record",
    show_default=True,
    help="Each chunk's query: 'record' (a chunk record, answer withheld), 'blank' (data-free "
    "image) or a public image path.",
)
@click.option(
    "--query-question",
    default="What is the answer?",
    show_default=True,
    help="Public question text for blank/public-image queries.",
)
@click.option(
    "--center",
    default="none",
    show_default=True,
    help="Public centring reference: 'none', 'blank', or a public records file.",
)
@click.option(
    "--batch-size",
    type=int,
    default=4,
    show_default=True,
    help="Batch size of PUBLIC prompts (centring reference, public selection). Private chunks always "
    "run one per forward pass, so no chunk's numerics depend on another's.",
)
@click.option(
    "--max-prompt-tokens",
    type=click.IntRange(min=1),
    help="Public token budget of one chunk prompt (default: the model's position limit; recorded in "
    "the artifact). Rule: a longer prompt keeps its leading demonstrations that fit; a chunk whose "
    "query alone does not fit contributes nothing (no vector, no selection vote).",
)
@click.option(
    "--noise-sampler",
    type=click.Choice(["opendp", "csprng-numpy"]),
    default="opendp",
    show_default=True,
    help="opendp: floating-point-safe exact sampler (default).",
)
@click.option(
    "--insecure-seeded-noise",
    "insecure_seed",
    type=int,
    help="INSECURE: seed the noise and partition (experiments only; recorded in the artifact).",
)
@click.option(
    "--non-private",
    is_flag=True,
    help="NON-PRIVATE baseline: no noise, no guarantee (ε = ∞, labelled in the artifact).",
)
@click.option("--quiet", is_flag=True, help="No progress bar.")
def command(
    model_path,
    data_path,
    head_spec,
    epsilon,
    delta,
    l2_clip_norm,
    shots_per_chunk,
    out,
    neighbouring_relation,
    num_chunks,
    query,
    query_question,
    center,
    batch_size,
    noise_sampler,
    insecure_seed,
    non_private,
    dtype,
    device,
    quiet,
    max_prompt_tokens,
    heads_from,
    select_k,
    select_method,
    selection_fraction,
    selection_composition,
    select_pool,
    privacy_unit,
    max_records_per_user,
    dataset,
    ledger_path,
):
    """Build a private task vector from private records (SPEC §4)."""
    from dpmtv.build import BuildSettings, PrivateSelectionSettings, build_task_vector
    from dpmtv.data import load_records
    from dpmtv.models.loading import load_model

    if epsilon is None and not non_private:
        raise ParameterError(
            "--epsilon is required (or --non-private for an explicitly non-private baseline)"
        )
    if (head_spec is None) == (heads_from is None):
        raise ParameterError("give exactly one of --heads or --heads-from")
    if non_private and dataset is not None:
        raise ParameterError("a --non-private build has no finite cost to charge: drop --dataset")
    ledger = resolve_build_ledger(ledger_path, dataset)
    records = load_records(data_path)
    loaded = load_model(model_path, dtype=dtype, device=device)
    private_selection = None
    if heads_from == "private":
        heads, head_selection = None, {"method": "private"}
        private_selection = PrivateSelectionSettings(
            k=select_k,
            selection_fraction=selection_fraction,
            composition=selection_composition,
            pool=select_pool,
        )
    else:
        heads, head_selection = resolve_heads(
            loaded,
            head_spec=head_spec,
            heads_from=heads_from,
            method=select_method,
            shots_per_chunk=shots_per_chunk,
            pool=select_pool,
            batch_size=batch_size,
            progress=not quiet,
        )
    settings = BuildSettings(
        epsilon=math.inf if non_private else epsilon,
        delta=delta,
        l2_clip_norm=l2_clip_norm,
        shots_per_chunk=shots_per_chunk,
        neighbouring_relation=neighbouring_relation,
        num_chunks=num_chunks,
        privacy_unit=privacy_unit,
        max_records_per_user=max_records_per_user,
        query=query,
        query_question=query_question,
        center=center,
        batch_size=batch_size,
        noise_sampler=noise_sampler,
        insecure_seed=insecure_seed,
        allow_insecure_seed=insecure_seed is not None,
        non_private=non_private,
        private_selection=private_selection,
        head_selection=head_selection,
        progress=not quiet,
        max_prompt_tokens=max_prompt_tokens,
    )
    charge = _ledger_charge(ledger, settings, loaded, out)
    result = build_task_vector(loaded, records, heads, settings, out=out, before_noise=charge)
    if charge is not None:
        charge.mark_written(str(result.path))
    for note in result.warnings:
        err_console.print(f"[yellow]warning:[/] {note}")
    print_vector_summary(result.vector.metadata, path=result.path)


def resolve_heads(loaded, *, head_spec, heads_from, method, shots_per_chunk, pool, batch_size, progress):
    """The released head set and how it was chosen: --heads, a saved selection, or a public
    selection run now on public records (no privacy cost: the records are public)."""
    from dpmtv.data import load_records
    from dpmtv.heads import parse_head_spec
    from dpmtv.selection import SelectionResult, select_public

    geometry = loaded.adapter.geometry
    if head_spec is not None:
        return parse_head_spec(head_spec, geometry), {"method": "user", "spec": head_spec}
    if heads_from.startswith("public:"):
        result = select_public(
            loaded,
            load_records(heads_from[len("public:") :]),
            method=method,
            shots=shots_per_chunk,
            pool=parse_head_spec(pool, geometry),
            batch_size=batch_size,
            progress=progress,
        )
    elif Path(heads_from).is_file():
        result = SelectionResult.load(heads_from)
    else:
        raise ParameterError(
            f"--heads-from '{heads_from}' is not 'public:FILE', 'private' or a saved selection file"
        )
    return result.heads.check(geometry), result.to_metadata()


def _ledger_charge(ledger, settings, loaded, out):
    """The ledger callback, with the build's PUBLIC parameters only (never data)."""
    if ledger is None:
        return None
    from dpmtv._version import __version__
    from dpmtv.privacy.ledger import LedgerCharge

    book, dataset = ledger
    parameters = {
        "epsilon": settings.epsilon,
        "delta": settings.delta,
        "l2_clip_norm": list(settings.l2_clip_norm),
        "shots_per_chunk": settings.shots_per_chunk,
        "num_chunks": settings.num_chunks,
        "neighbouring_relation": settings.neighbouring_relation,
        "privacy_unit": settings.privacy_unit,
        "noise_sampler": settings.noise_sampler,
        "model": loaded.name_or_path,
        "head_selection": settings.head_selection,
        "dpmtv": __version__,
    }
    return LedgerCharge(book, dataset, parameters=parameters, artifact=str(out))
