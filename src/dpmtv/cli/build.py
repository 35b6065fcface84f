from __future__ import annotations

import math
import sqlite3
from dataclasses import replace
from pathlib import Path

import click
from rich.markup import escape

from dpmtv._output_path import (
    artifact_size_bound,
    check_not_an_input,
    check_output_path,
    check_output_space,
    prepare_output_folder,
)
from dpmtv.cli._common import (
    build_settings,
    clip_norms_or_auto,
    console,
    err_console,
    model_options,
    print_vector_summary,
    print_warning,
)
from dpmtv.cli._ray import check_ray_installed, ray_executor, ray_options
from dpmtv.cli.budget import ledger_option, resolve_build_ledger
from dpmtv.errors import LedgerError, ParameterError
from dpmtv.pipeline.public_clip import DEFAULT_CLIP_QUANTILE
from dpmtv.pipeline.settings import DEFAULT_L2_CLIP_NORM, DEFAULT_SHOTS_PER_CHUNK


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
    callback=clip_norms_or_auto,
    default=f"{DEFAULT_L2_CLIP_NORM:g}",
    show_default=True,
    help="Per-layer L2 clip norm C: one value, one per released layer (comma-separated), or 'auto': "
    "per layer, the --clip-quantile of the released heads' norms on chunks of --public-data records "
    "(public, so the chosen C costs no privacy; it is printed and stored in the artifact).",
)
@click.option(
    "--public-data",
    type=click.Path(path_type=Path),
    help="Public records (never the private ones) for --l2-clip-norm auto.",
)
@click.option(
    "--clip-quantile",
    type=float,
    default=DEFAULT_CLIP_QUANTILE,
    show_default=True,
    help="With --l2-clip-norm auto: the quantile of the public chunk norms taken as C.",
)
@click.option(
    "--shots-per-chunk",
    type=int,
    default=DEFAULT_SHOTS_PER_CHUNK,
    show_default=True,
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
    help="replace-one (default for --privacy-unit record): N is public. add-remove-one (the "
    "default, and the only choice, for --privacy-unit user): needs record ids and --num-chunks.",
)
@click.option(
    "--num-chunks", type=int, help="Public, fixed m (required for add-remove-one and --privacy-unit user)."
)
@click.option(
    "--privacy-unit",
    type=click.Choice(["record", "user"]),
    default="record",
    show_default=True,
    help="record: the guarantee is per record. user: per user (add/remove one user) — records need "
    "'user_id', each user's records go to one chunk (keyed hash, fresh key per build) and are "
    "capped at --max-records-per-user (the excess is dropped); needs --num-chunks.",
)
@click.option(
    "--max-records-per-user", type=int, help="Public cap on a user's records (--privacy-unit user)."
)
@click.option(
    "--show-private-counts",
    is_flag=True,
    help="Print N, the number of users and the records dropped by the cap, which are private under "
    "add-remove-one and user level (printed only: never stored in the artifact or ledger).",
)
@click.option(
    "--dataset",
    help="Charge this build to the named dataset budget in the ledger (see `dpmtv budget`); the "
    "charge is taken just before noise is drawn, and a build that would exceed it is refused.",
)
@ledger_option
@click.option(
    "--ledger-timeout",
    "ledger_timeout_s",
    type=float,
    default=30.0,
    show_default=True,
    help="Seconds to wait for the ledger while another process is writing to it, then refuse.",
)
@click.option(
    "--force",
    is_flag=True,
    help="Replace an existing dpmtv artifact at --out (never any other file).",
)
@click.option(
    "--void-budget",
    is_flag=True,
    help="With --non-private or --insecure-seeded-noise and --dataset: record the build in the "
    "ledger, which marks the dataset's guarantee VOID for good (such a build has none).",
)
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
    help="opendp: exact discrete Gaussian, floating-point safe (default); csprng-numpy: OS CSPRNG "
    "bytes through Box–Muller, faster, not floating-point safe.",
)
@click.option(
    "--insecure-seeded-noise",
    "insecure_seed",
    type=int,
    help="INSECURE: seed every random choice — partition, per-user caps, private selection and "
    "noise — so that builds on neighbouring datasets differ only by the data (experiments and "
    "audits only). The artifact records the seed and says NO GUARANTEE: the seed regenerates the noise.",
)
@click.option(
    "--non-private",
    is_flag=True,
    help="NON-PRIVATE baseline: no noise, no guarantee (ε = ∞, labelled in the artifact).",
)
@ray_options("sums of clipped vectors (with --heads-from private, also votes); noise is added once, here")
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
    show_private_counts,
    dataset,
    ledger_path,
    ledger_timeout_s,
    force,
    void_budget,
    public_data,
    clip_quantile,
    ray_address,
    workers,
    gpus_per_worker,
):
    """Build a private task vector from private records (docs/design.md §2)."""
    from dpmtv._build_time import build_timestamp
    from dpmtv.data import load_records
    from dpmtv.models.loading import load_model
    from dpmtv.pipeline.build import build_task_vector
    from dpmtv.pipeline.settings import relation_for_unit

    started_at = build_timestamp()  # the one time stored, taken before any record is read
    if epsilon is None and not non_private:
        raise ParameterError(
            "--epsilon is required (or --non-private for an explicitly non-private baseline)"
        )
    if (head_spec is None) == (heads_from is None):
        raise ParameterError("give exactly one of --heads or --heads-from")
    _check_auto_clip(l2_clip_norm, public_data, heads_from)
    void_reason = _void_reason(non_private, insecure_seed, dataset, void_budget)
    if not ledger_timeout_s >= 0:
        raise ParameterError(f"--ledger-timeout must be >= 0 seconds, got {ledger_timeout_s}")
    ledger = resolve_build_ledger(ledger_path, dataset)
    check_output_path(out, force=force, protected=_protected_paths(data_path, ledger))
    if ledger is not None:  # refuse an unknown dataset, another relation or a spent budget now
        relation = relation_for_unit(privacy_unit, neighbouring_relation).value
        _check_ledger(*ledger, relation, privacy_unit, void_reason, timeout_s=ledger_timeout_s)
    check_ray_installed(ray_address)
    records = load_records(data_path)
    check_not_an_input(out, _image_paths(records), "an image of a record")
    _check_public_inputs(records, heads_from, center, query, public_data)
    prepare_output_folder(out)
    loaded = load_model(model_path, dtype=dtype, device=device)
    params = click.get_current_context().params
    heads, head_selection, private_selection = _heads(loaded, params)
    settings = build_settings(
        params,
        epsilon=math.inf if non_private else epsilon,
        l2_clip_norm=(1.0,) if l2_clip_norm == "auto" else l2_clip_norm,  # auto: chosen just below
        allow_insecure_seed=insecure_seed is not None,
        private_selection=private_selection,
        head_selection=head_selection,
    )
    if l2_clip_norm == "auto":
        settings = replace(
            settings,
            l2_clip_norm=_auto_clip_norms(loaded, heads, public_data, clip_quantile, settings, quiet=quiet),
        )
    num_heads = len(heads.pairs) if heads is not None else select_k
    geometry = loaded.adapter.geometry
    check_output_space(
        out, artifact_size_bound(num_heads=num_heads, head_dim=geometry.head_dim, centred=center != "none")
    )
    charge = _ledger_charge(ledger, settings, loaded, out, void_reason, started_at)
    with ray_executor(ray_address, workers, gpus_per_worker, loaded, dtype=dtype, device=device) as executor:
        try:
            result = build_task_vector(
                loaded,
                records,
                heads,
                settings,
                out=out,
                before_noise=charge,
                executor=executor,
                started_at=started_at,
            )
        except BaseException as exc:
            _explain_failure(charge, exc)
            raise
    if charge is not None:
        charge.mark_written(result.path, tensors_sha256=_tensors_sha256(result.path))
    for note in result.warnings:
        print_warning(note)
    print_vector_summary(result.vector.metadata, path=result.path)
    if charge is not None:
        _print_charge(charge)


def _check_auto_clip(l2_clip_norm, public_data, heads_from) -> None:
    """'auto' needs public records and a head set known before the build (not a private pick)."""
    if l2_clip_norm == "auto" and public_data is None:
        raise ParameterError(
            "--l2-clip-norm auto chooses C from public records: add --public-data FILE (public records, "
            "never the private ones), or give C as a number"
        )
    if l2_clip_norm != "auto" and public_data is not None:
        raise ParameterError("--public-data is used only with --l2-clip-norm auto")
    if l2_clip_norm == "auto" and heads_from == "private":
        raise ParameterError(
            "--l2-clip-norm auto needs the released heads before the build, but --heads-from private "
            "picks them from the private data: give C as a number (one per pool layer)"
        )


def _auto_clip_norms(loaded, heads, public_data, quantile, settings, *, quiet) -> tuple[float, ...]:
    """C per released layer from the PUBLIC records alone, centred as the build centres."""
    from dpmtv.data import load_records
    from dpmtv.pipeline.build import reference_activations
    from dpmtv.pipeline.public_clip import public_clip_norms

    public = load_records(public_data)
    norms = public_clip_norms(
        loaded,
        public,
        heads,
        shots_per_chunk=settings.shots_per_chunk,
        query=settings.query_source,
        query_question=settings.query_question,
        quantile=quantile,
        batch_size=settings.batch_size,
        reference=reference_activations(loaded, heads, settings),
    )
    if not quiet:
        err_console.print(
            f"--l2-clip-norm auto: C per layer from {len(public)} public records (quantile {quantile:g}): "
            + ", ".join(f"layer {layer}: {c:.4g}" for layer, c in zip(heads.layers, norms, strict=True)),
            highlight=False,
        )
    return norms


def _protected_paths(data_path, ledger) -> dict[str, Path]:
    """Files --out must never replace (a records folder protects everything in it)."""
    from dpmtv.cli.budget import default_ledger_path

    protected = {"the records folder" if data_path.is_dir() else "the records file": data_path}
    protected["the ledger"] = ledger[0].path if ledger is not None else default_ledger_path()
    return protected


def _image_paths(records):
    return (source for record in records for source in record.images if isinstance(source, Path))


def _explain_failure(charge, exc: BaseException) -> None:
    """A build that fails after its charge keeps the charge (noise was drawn): say so plainly.
    An OS error there (a full disk) becomes one clear error line, not a traceback."""
    from dpmtv.ledger.book import Void

    receipt = None if charge is None else charge.receipt
    if receipt is None:
        if charge is not None and isinstance(exc, sqlite3.OperationalError):  # still locked at the charge
            raise LedgerError(f"ledger '{charge.ledger.path}': {exc}; nothing was charged") from None
        if isinstance(exc, OSError):
            nothing = "; nothing was charged" if charge is not None else ""
            raise ParameterError(f"the build failed, the artifact was not written: {exc}{nothing}") from None
        return
    spent = (
        f"dataset {charge.dataset!r} was voided"
        if isinstance(receipt, Void)
        else f"ε was charged to dataset {charge.dataset!r} (charge {receipt.charge_id}; "
        f"{receipt.epsilon_spent:.2f} of {receipt.epsilon_budget:.2f} now spent)"
    )
    message = f"{spent} for a build that then failed; the charge stands (noise was drawn)"
    if isinstance(exc, OSError):
        raise ParameterError(f"{message}. The artifact was not written: {exc}") from None
    err_console.print(f"[bold red]{escape(message)}[/]", highlight=False, soft_wrap=True)


def _void_reason(non_private, insecure_seed, dataset, void_budget) -> str | None:
    """Why a build that names --dataset voids it (None: it is charged), or a refusal."""
    reason = (
        "a --non-private build (no noise)"
        if non_private
        else f"an --insecure-seeded-noise {insecure_seed} build (its noise can be regenerated)"
        if insecure_seed is not None
        else None
    )
    if void_budget and (reason is None or dataset is None):
        raise ParameterError(
            "--void-budget is only for a --non-private or --insecure-seeded-noise build that names --dataset"
        )
    if reason is not None and dataset is not None and not void_budget:
        raise ParameterError(
            f"{reason} has no privacy guarantee, so it cannot be charged to dataset {dataset!r}: drop "
            f"--dataset, or add --void-budget to record it and mark the dataset's guarantee VOID for good"
        )
    return reason if dataset is not None else None


def _check_ledger(book, dataset, neighbouring_relation, privacy_unit, void_reason, *, timeout_s) -> None:
    """Refuse an unknown dataset, another relation or unit, or a ledger that cannot be written."""
    from dpmtv.ledger.access import check_ledger_writable

    book.busy_timeout_s = timeout_s
    if void_reason is not None:
        book.status(dataset)  # it must exist
    else:
        book.check_dataset(dataset, neighbouring_relation=neighbouring_relation, privacy_unit=privacy_unit)
    check_ledger_writable(book, timeout_s=timeout_s, on_wait=print_warning)


def _heads(loaded, params):
    """(head set, how it was chosen, private selection settings): --heads or --heads-from."""
    from dpmtv.heads import resolve_heads
    from dpmtv.pipeline.settings import PrivateSelectionSettings

    if params["heads_from"] == "private":
        private_selection = PrivateSelectionSettings(
            k=params["select_k"],
            selection_fraction=params["selection_fraction"],
            composition=params["selection_composition"],
            pool=params["select_pool"],
        )
        return None, {"method": "private"}, private_selection
    heads, head_selection = resolve_heads(
        loaded,
        head_spec=params["head_spec"],
        heads_from=params["heads_from"],
        method=params["select_method"],
        shots_per_chunk=params["shots_per_chunk"],
        pool=params["select_pool"],
        batch_size=params["batch_size"],
        progress=not params["quiet"],
    )
    return heads, head_selection, None


def _check_public_inputs(records, heads_from, center, query, public_data) -> None:
    """Public files that must not hold private records, checked before any forward pass."""
    from dpmtv.data.overlap import check_public_inputs

    public_records = {} if public_data is None else {"--public-data": public_data}
    if heads_from is not None and heads_from.startswith("public:"):
        public_records["--heads-from"] = heads_from[len("public:") :]
    if center not in ("none", "blank"):
        public_records["--center"] = center
    public_images = {} if query in ("record", "blank") else {"--query": query}
    check_public_inputs(records, public_records=public_records, public_images=public_images)


def _ledger_charge(ledger, settings, loaded, out, void_reason, started_at):
    """The ledger callback (None without --dataset)."""
    if ledger is None:
        return None
    from dpmtv._version import __version__
    from dpmtv.ledger.book import LedgerCharge

    book, dataset = ledger
    return LedgerCharge.for_build(
        book,
        dataset,
        settings,
        model=loaded.name_or_path,
        library_version=__version__,
        artifact=out,
        void_reason=void_reason,
        started_at=started_at,
    )


def _tensors_sha256(path) -> str:
    """The hash the written artifact records (read back, so the ledger holds what is on disk)."""
    from dpmtv.vector import load_task_vector

    return load_task_vector(path).metadata.tensors_sha256


def _print_charge(charge) -> None:
    """The build's line in the ledger: what the dataset has spent now, or that it is void."""
    status = charge.ledger.status(charge.dataset)
    if status.void:
        console.print(
            f"[bold red]{status.name}: guarantee VOID[/] ({len(status.voids)} build(s) without a "
            f"guarantee used it); {status.epsilon_spent:.2f} of {status.epsilon_budget:.2f} spent",
            highlight=False,
        )
    else:
        console.print(
            f"{status.name}: {status.epsilon_spent:.2f} of {status.epsilon_budget:.2f} spent "
            f"(ε at δ = {status.delta:g}, {len(status.charges)} charge(s), ledger {charge.ledger.path})",
            highlight=False,
        )
