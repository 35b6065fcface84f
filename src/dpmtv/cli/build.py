from __future__ import annotations

import contextlib
import math
import sqlite3
from pathlib import Path

import click
from rich.markup import escape

from dpmtv._output_path import check_not_an_input, check_output_path, prepare_output_folder
from dpmtv.cli._common import (
    console,
    err_console,
    float_list,
    model_options,
    print_vector_summary,
    print_warning,
)
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
@click.option(
    "--ray",
    "ray_address",
    help="Extract the chunks on Ray workers: 'auto' (this machine's Ray cluster, or a new local "
    "one) or a cluster address. Workers get chunk contents only and return sums of clipped "
    "vectors; noise is added once, here. Needs the ray extra: pip install 'dpmtv[ray]'.",
)
@click.option(
    "--workers",
    type=click.IntRange(min=1),
    default=2,
    show_default=True,
    help="Ray workers (with --ray), each loading the model once.",
)
@click.option(
    "--gpus-per-worker",
    type=click.FloatRange(min=0),
    default=0.0,
    show_default=True,
    help="GPUs each Ray worker reserves (with --ray and --device cuda); fractions share a GPU.",
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
    show_private_counts,
    dataset,
    ledger_path,
    ledger_timeout_s,
    force,
    void_budget,
    ray_address,
    workers,
    gpus_per_worker,
):
    """Build a private task vector from private records (docs/design.md §2)."""
    from dpmtv.build import BuildSettings, PrivateSelectionSettings, build_task_vector
    from dpmtv.data import load_records
    from dpmtv.models.loading import load_model
    from dpmtv.privacy.ledger_access import check_ledger_writable
    from dpmtv.settings import relation_for_unit

    if epsilon is None and not non_private:
        raise ParameterError(
            "--epsilon is required (or --non-private for an explicitly non-private baseline)"
        )
    if (head_spec is None) == (heads_from is None):
        raise ParameterError("give exactly one of --heads or --heads-from")
    void_reason = _void_reason(non_private, insecure_seed, dataset, void_budget)
    if not ledger_timeout_s >= 0:
        raise ParameterError(f"--ledger-timeout must be >= 0 seconds, got {ledger_timeout_s}")
    ledger = resolve_build_ledger(ledger_path, dataset)
    check_output_path(out, force=force, protected=_protected_paths(data_path, ledger))
    if ledger is not None:  # refuse an unknown dataset, another relation or a spent budget now
        ledger[0].busy_timeout_s = ledger_timeout_s
        relation = relation_for_unit(privacy_unit, neighbouring_relation).value
        _check_dataset(*ledger, relation, privacy_unit, void_reason)
        check_ledger_writable(ledger[0], timeout_s=ledger_timeout_s, on_wait=print_warning)
    if ray_address is not None:  # before any work: a missing extra is one line with the install command
        from dpmtv.distributed.ray_executor import import_ray

        import_ray()
    records = load_records(data_path)
    check_not_an_input(out, _image_paths(records), "an image of a record")
    _check_public_inputs(records, heads_from, center, query)
    prepare_output_folder(out)
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
        show_private_counts=show_private_counts,
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
    charge = _ledger_charge(ledger, settings, loaded, out, void_reason)
    with _executor(ray_address, workers, gpus_per_worker, loaded, dtype, device) as executor:
        try:
            result = build_task_vector(
                loaded, records, heads, settings, out=out, before_noise=charge, executor=executor
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


def _executor(ray_address, workers, gpus_per_worker, loaded, dtype, device):
    """A Ray executor for ``--ray`` (closed after the build), else nothing: a local build."""
    if ray_address is None:
        if gpus_per_worker:
            raise ParameterError("--gpus-per-worker needs --ray")
        return contextlib.nullcontext(None)
    from dpmtv.distributed import ModelSource, RayExecutor
    from dpmtv.models.loading import current_remote_code_options

    remote = current_remote_code_options()
    source = ModelSource(
        loaded.name_or_path,
        dtype=dtype,
        device=device,
        adapter_spec=None if remote.adapter_spec is None else str(remote.adapter_spec),
        trust_remote_code=remote.trust_remote_code,
    )
    return RayExecutor(source, workers=workers, address=ray_address, gpus_per_worker=gpus_per_worker)


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
    from dpmtv.privacy.ledger import Void

    receipt = None if charge is None else charge.receipt
    if receipt is None:
        if charge is not None and isinstance(exc, sqlite3.OperationalError):  # still locked at the charge
            raise ParameterError(f"ledger '{charge.ledger.path}': {exc}; nothing was charged") from None
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


def _check_dataset(book, dataset, neighbouring_relation, privacy_unit, void_reason) -> None:
    if void_reason is not None:
        book.status(dataset)  # it must exist
    else:
        book.check_dataset(dataset, neighbouring_relation=neighbouring_relation, privacy_unit=privacy_unit)


def _check_public_inputs(records, heads_from, center, query) -> None:
    """Public files that must not hold private records, checked before any forward pass."""
    from dpmtv.data.overlap import check_public_inputs

    public_records = {}
    if heads_from is not None and heads_from.startswith("public:"):
        public_records["--heads-from"] = heads_from[len("public:") :]
    if center not in ("none", "blank"):
        public_records["--center"] = center
    public_images = {} if query in ("record", "blank") else {"--query": query}
    check_public_inputs(records, public_records=public_records, public_images=public_images)


def _ledger_charge(ledger, settings, loaded, out, void_reason):
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
        "neighbouring_relation": settings.relation.value,
        "privacy_unit": settings.privacy_unit.value,
        "noise_sampler": settings.noise_sampler,
        "insecure_seed": settings.insecure_seed,
        "non_private": settings.non_private,
        "model": loaded.name_or_path,
        "head_selection": settings.head_selection,
        "dpmtv": __version__,
    }
    return LedgerCharge(
        book,
        dataset,
        neighbouring_relation=settings.relation.value,
        privacy_unit=settings.privacy_unit.value,
        parameters=parameters,
        artifact=out,
        void_reason=void_reason,
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
