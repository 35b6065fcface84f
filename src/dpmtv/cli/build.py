from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

import click
from rich.markup import escape

from dpmtv._build_time import build_timestamp
from dpmtv.cli._build_config import EXAMPLES, GroupedHelpCommand, print_json_summary
from dpmtv.cli._build_options import build_options
from dpmtv.cli._common import (
    console,
    err_console,
    print_vector_summary,
    print_warning,
)
from dpmtv.cli._config_file import config_options
from dpmtv.cli._output_path import (
    artifact_size_bound,
    check_not_an_input,
    check_output_path,
    check_output_space,
    prepare_output_folder,
)
from dpmtv.cli._private_rounds import private_clip_settings, private_selection_settings
from dpmtv.cli._ray import check_ray_installed, ray_executor
from dpmtv.cli.budget import resolve_build_ledger
from dpmtv.errors import DistributedError, ParameterError

if TYPE_CHECKING:
    from dpmtv.heads import HeadSet
    from dpmtv.ledger.build_charge import BuildCharge
    from dpmtv.pipeline.settings import BuildSettings


@click.command(name="build", cls=GroupedHelpCommand, epilog=EXAMPLES)
@build_options
@config_options
def command(**options) -> None:
    """Build a private task vector from private records (docs/design.md §2)."""
    from dpmtv.data import load_records
    from dpmtv.models.loading import load_model
    from dpmtv.pipeline.settings import relation_for_unit

    started_at = build_timestamp()  # the one time the build stores, taken before any record is read
    _check_options(options)
    charge = _build_charge(options)
    out = options["out"]
    check_output_path(out, force=options["force"], protected=_protected_paths(options["data_path"], charge))
    if charge is not None:  # refuse an unknown dataset, another relation or a spent budget now
        unit = options["privacy_unit"]
        relation = relation_for_unit(unit, options["neighbouring_relation"]).value
        charge.check(neighbouring_relation=relation, privacy_unit=unit, on_wait=print_warning)
    check_ray_installed(options["ray_address"])
    records = load_records(options["data_path"])
    check_not_an_input(out, _image_paths(records), "an image of a record")
    records = _check_public_inputs(records, options)
    prepare_output_folder(out)
    loaded = load_model(options["model_path"], dtype=options["dtype"], device=options["device"])
    heads, settings = _heads_and_settings(loaded, options)
    num_heads = len(heads.pairs) if heads is not None else _most_selected_heads(loaded, settings)
    centered, head_dim = options["center"] != "none", loaded.adapter.geometry.head_dim
    check_output_space(out, artifact_size_bound(num_heads=num_heads, head_dim=head_dim, centered=centered))
    result = _build(loaded, records, heads, settings, options, charge, started_at=started_at)
    for note in result.warnings:
        print_warning(note)
    if options["as_json"]:
        print_json_summary(result.path, ledger_status=charge.status() if charge is not None else None)
        return
    print_vector_summary(result.vector.metadata, path=result.path, signature=_signature_line(result.path))
    if charge is not None:
        _print_charge(charge)


def _check_options(options) -> None:
    """The options' own rules, before anything is read."""
    if options["epsilon"] is None and not options["non_private"]:
        raise ParameterError(
            "--epsilon is required (or --non-private for an explicitly non-private baseline)"
        )
    if (options["head_spec"] is None) == (options["heads_from"] is None):
        raise ParameterError("give exactly one of --heads or --heads-from")
    _check_auto_clip(
        options["l2_clip_norm"], options["public_data"], options["heads_from"], options["non_private"]
    )
    if options["sign_key"] is not None:  # a bad key must not surface after the charge
        from dpmtv.artifact.signature import check_signing_key

        check_signing_key(options["sign_key"])


def _signature_line(path: Path) -> str:
    """What the summary says of the signature the build wrote with the artifact (or its absence)."""
    from dpmtv.artifact.signature import signature_path, signer_key_sha256

    signer = signer_key_sha256(path)
    if signer is None:
        return "unsigned (no --sign-key)"
    return f"signed by key sha256:{signer[:16]}… into {signature_path(path)} (the artifact and its card)"


def _build_charge(options) -> BuildCharge | None:
    """The build's account with the ledger (None without --dataset); refusals come first."""
    from dpmtv.ledger.build_charge import BuildCharge, void_reason

    dataset = options["dataset"]
    reason = void_reason(
        non_private=options["non_private"],
        insecure_seed=options["insecure_seed"],
        dataset=dataset,
        void_budget=options["void_budget"],
    )
    if not options["ledger_timeout_s"] >= 0:
        raise ParameterError(f"--ledger-timeout must be >= 0 seconds, got {options['ledger_timeout_s']}")
    ledger = resolve_build_ledger(options["ledger_path"], dataset)
    if ledger is None:
        return None
    return BuildCharge(ledger[0], dataset, void_reason=reason, timeout_s=options["ledger_timeout_s"])


def _settings(options, **derived) -> BuildSettings:
    """The options, named one by one, as the build's settings; ``derived``: what the command
    works out itself (the head selection, the clip norms)."""
    from dpmtv.pipeline.settings import BuildSettings  # imported when needed: it pulls in numpy

    return BuildSettings(
        epsilon=math.inf if options["non_private"] else options["epsilon"],
        delta=options["delta"],
        shots_per_chunk=options["shots_per_chunk"],
        privacy_unit=options["privacy_unit"],
        neighbouring_relation=options["neighbouring_relation"],
        num_chunks=options["num_chunks"],
        max_records_per_user=options["max_records_per_user"],
        query=options["query"],
        query_question=options["query_question"],
        center=options["center"],
        batch_size=options["batch_size"],
        noise_sampler=options["noise_sampler"],
        insecure_seed=options["insecure_seed"],
        allow_insecure_seed=options["insecure_seed"] is not None,
        non_private=options["non_private"],
        show_private_counts=options["show_private_counts"],
        progress=not options["quiet"],
        max_prompt_tokens=options["max_prompt_tokens"],
        prepare_workers=options["prepare_workers"],
        private_batch_size=options["private_batch_size"],
        **derived,
    )


def _heads_and_settings(loaded, options) -> tuple[HeadSet | None, BuildSettings]:
    """The released head set (None: chosen privately inside the build) and the settings, with
    C chosen from the public records first for ``--l2-clip-norm auto``."""
    heads, head_selection, private_selection = _heads(loaded, options)
    auto, private = options["l2_clip_norm"] == "auto", options["l2_clip_norm"] == "private"
    private_clip = private_clip_settings(options) if private else None
    settings = _settings(
        options,
        # auto: chosen just below; private: inside the build
        l2_clip_norm=(1.0,) if auto or private else options["l2_clip_norm"],
        private_selection=private_selection,
        private_clip=private_clip,
        head_selection=head_selection,
    )
    if auto:
        norms = _auto_clip_norms(
            loaded, heads, options["public_data"], options["clip_quantile"], settings, quiet=options["quiet"]
        )
        settings = replace(settings, l2_clip_norm=norms)
    return heads, settings


def _build(loaded, records, heads, settings, options, charge: BuildCharge | None, *, started_at: str):
    """Run the build (on Ray workers with --ray), charged right before its first noise draw;
    ``started_at`` is the one time it stores (ledger rows, artifact)."""
    from dpmtv._version import __version__
    from dpmtv.pipeline.build import build_task_vector

    out = options["out"]
    before_noise = None
    if charge is not None:
        model = loaded.name_or_path
        before_noise = charge.callback(
            settings,
            model=model,
            library_version=__version__,
            artifact=out,
            started_at=started_at,
            num_records=len(records),  # recorded under replace-one only, where N is public
        )
    ray = options["ray_address"], options["workers"], options["gpus_per_worker"], loaded
    with ray_executor(*ray, dtype=options["dtype"], device=options["device"]) as executor:
        try:
            result = build_task_vector(
                loaded,
                records,
                heads,
                settings,
                out=out,
                before_noise=before_noise,
                executor=executor,
                started_at=started_at,
                sign_key=options["sign_key"],
            )
        except BaseException as exc:
            _explain_failure(charge, exc)
            raise
    if charge is not None:
        unrecorded = charge.mark_written(result.path, tensors_sha256=_tensors_sha256(result.path))
        if unrecorded is not None:  # the artifact and the charge are both fine: a warning
            print_warning(unrecorded)
    return result


def _check_auto_clip(l2_clip_norm, public_data, heads_from, non_private) -> None:
    """'auto' needs public records and a head set known before the build (not a private pick)."""
    if l2_clip_norm == "auto" and public_data is None:
        raise ParameterError(
            "--l2-clip-norm auto chooses C from public records: add --public-data FILE (public records, "
            "never the private ones), or give C as a number"
        )
    if l2_clip_norm != "auto" and public_data is not None:
        raise ParameterError("--public-data is used only with --l2-clip-norm auto")
    if l2_clip_norm == "private" and non_private:
        raise ParameterError("--l2-clip-norm private spends privacy budget; a --non-private build has none")
    if l2_clip_norm == "auto" and heads_from == "private":
        raise ParameterError(
            "--l2-clip-norm auto needs the released heads before the build, but --heads-from private "
            "picks them from the private data: give C as a number (one per pool layer)"
        )


def _auto_clip_norms(loaded, heads, public_data, quantile, settings, *, quiet) -> tuple[float, ...]:
    """C per released layer from the PUBLIC records alone, centered as the build centers."""
    from dpmtv.data import load_records
    from dpmtv.pipeline.public_clip import public_clip_norms
    from dpmtv.pipeline.reference import reference_activations

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


def _protected_paths(data_path, charge: BuildCharge | None) -> dict[str, Path]:
    """Files --out must never replace (a records folder protects everything in it)."""
    from dpmtv.cli.budget import default_ledger_path

    protected = {"the records folder" if data_path.is_dir() else "the records file": data_path}
    protected["the ledger"] = charge.ledger.path if charge is not None else default_ledger_path()
    return protected


def _image_paths(records):
    return (source for record in records for source in record.images if isinstance(source, Path))


def _explain_failure(charge: BuildCharge | None, exc: BaseException) -> None:
    """A build that fails after its charge keeps the charge (noise was drawn): say so plainly.
    An OS error there (a full disk) becomes one clear error line, not a traceback."""
    message = None if charge is None else charge.failure_message(exc)
    if isinstance(exc, OSError):
        if message is None:
            nothing = "; nothing was charged" if charge is not None else ""
            raise ParameterError(f"the build failed, the artifact was not written: {exc}{nothing}") from None
        raise ParameterError(f"{message}. The artifact was not written: {exc}") from None
    if isinstance(exc, DistributedError):  # a lost worker or raylet, a refused sum: one line
        raise DistributedError(f"{exc}; {message or 'nothing was charged'}") from None
    if message is not None:
        err_console.print(f"[bold red]{escape(message)}[/]", highlight=False, soft_wrap=True)


def _heads(loaded, params):
    """(head set, how it was chosen, private selection settings): --heads or --heads-from."""
    from dpmtv.selection.resolve import resolve_heads

    if params["heads_from"] == "private":
        return None, {"method": "private"}, private_selection_settings(loaded, params)
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


def _most_selected_heads(loaded, settings) -> int:
    """The most heads a private selection can release: k, or a candidate's whole pool."""
    from dpmtv.heads import parse_head_spec

    selection = settings.private_selection
    if selection.method == "candidates":
        return len(parse_head_spec(selection.pool, loaded.adapter.geometry).pairs)
    return selection.k


def _check_public_inputs(records, options):
    """The options' public files, checked by the pipeline before any forward pass (the public
    selection and --l2-clip-norm auto run before the build); the build does not check them again."""
    from dpmtv.pipeline.public_inputs import PublicFiles, check_public_inputs

    heads_from, center, query, public_data = (
        options[k] for k in ("heads_from", "center", "query", "public_data")
    )
    public_records = {} if public_data is None else {"--public-data": Path(public_data)}
    if heads_from is not None and heads_from.startswith("public:"):
        public_records["--heads-from"] = Path(heads_from[len("public:") :])
    if center not in ("none", "blank"):
        public_records["--center"] = Path(center)
    public_images = {} if query in ("record", "blank") else {"--query": Path(query)}
    return check_public_inputs(records, PublicFiles(public_records, public_images))


def _tensors_sha256(path) -> str:
    """The hash the written artifact records (read back, so the ledger holds what is on disk)."""
    from dpmtv.artifact.vector import load_task_vector

    return load_task_vector(path).metadata.tensors_sha256


def _print_charge(charge: BuildCharge) -> None:
    """The build's line in the ledger: what the dataset has spent now, or that it is void."""
    status = charge.status()
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
