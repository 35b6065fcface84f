"""``dpmtv audit``: an empirical lower bound on the release's ε versus the claimed ε."""

from __future__ import annotations

import sys
from pathlib import Path

import click
from rich.table import Table

from dpmtv.cli._audit_rounds import round_options, round_settings
from dpmtv.cli._common import (
    announce_auto_device,
    build_settings,
    clip_norms_or_auto,
    console,
    err_console,
    float_list,
    prepare_workers_option,
    private_batch_size_option,
)
from dpmtv.cli._ray import check_ray_installed, ray_executor, ray_options
from dpmtv.errors import ParameterError

_MODEL_OPTIONS = ("data_path", "head_spec", "l2_clip_norm", "shots_per_chunk")


@click.command(name="audit")
@click.option(
    "--model", "model_path", help="Checkpoint folder, hub id or 'embedded'; omit for synthetic mode."
)
@click.option("--data", "data_path", type=click.Path(path_type=Path), help="Records (model mode).")
@click.option("--heads", "head_spec", help="Head spec as for build (model mode).")
@click.option(
    "--l2-clip-norm",
    callback=clip_norms_or_auto,
    help="C: one value or one per layer [synthetic: 1]; --sensitivity: or 'private' (as for build).",
)
@click.option("--shots-per-chunk", type=int, help="Records per chunk s [synthetic: 4].")
@click.option("--trials", type=int, default=10000, show_default=True, help="Releases per dataset (D and D').")
@click.option(
    "--epsilons",
    callback=float_list,
    default="0.5,1,2,4,8",
    show_default=True,
    help="Claimed ε values to audit.",
)
@click.option("--delta", type=float, default=1e-5, show_default=True)
@click.option(
    "--confidence",
    type=float,
    default=0.95,
    show_default=True,
    help="Family-wise confidence over all --epsilons: each lower bound is computed at "
    "1 − (1 − confidence)/K for K values (Bonferroni), so no correct claim is flagged with "
    "probability >= confidence.",
)
@click.option(
    "--mechanism",
    type=click.Choice(["correct", "small-noise", "no-clip"]),
    default="correct",
    show_default=True,
    help="Audit the correct release or a deliberately broken one (σ/4, clipping off).",
)
@click.option(
    "--num-chunks",
    type=int,
    help="Synthetic mode: m [16]. --sensitivity: the public m (add-remove-one, user level).",
)
@click.option(
    "--sensitivity",
    is_flag=True,
    help="Audit the sensitivity instead of ε: on the model and records, the build's own partition "
    "and extraction on seeded partitions; reports max ‖mean(D) − mean(D′)‖ / Δ over neighbouring "
    "pairs at the unit and relation given (must be <= 1), and with --heads-from private or "
    "--l2-clip-norm private each round's max|u(D) − u(D′)| / Δ∞ over its candidates (must be <= 1). "
    "Writes sensitivity.json/.md.",
)
@click.option(
    "--privacy-unit",
    type=click.Choice(["record", "user"]),
    default="record",
    show_default=True,
    help="--sensitivity: as for build.",
)
@click.option(
    "--neighbouring-relation",
    type=click.Choice(["replace-one", "add-remove-one"]),
    help="--sensitivity: as for build.",
)
@click.option("--max-records-per-user", type=int, help="--sensitivity: as for build (user level).")
@click.option("--center", default="none", show_default=True, help="--sensitivity: as for build.")
@click.option(
    "--partitions", type=int, default=20, show_default=True, help="--sensitivity: seeded partitions."
)
@click.option(
    "--neighbours",
    type=int,
    default=4,
    show_default=True,
    help="--sensitivity: removed/replaced records or users per partition (plus one added).",
)
@click.option("--synthetic-dim", type=int, default=32, show_default=True, help="Synthetic mode: D per layer.")
@click.option("--synthetic-layers", type=int, default=2, show_default=True, help="Synthetic mode: L'.")
@click.option("--query", default="record", show_default=True, help="Model mode: chunk query, as for build.")
@click.option("--batch-size", type=int, default=4, show_default=True)
@click.option("--dtype", default="float32", type=click.Choice(["float32", "bfloat16", "float16"]))
@click.option(
    "--device",
    default="auto",
    show_default=True,
    envvar="DPMTV_DEVICE",
    help="torch device (auto: the GPU if torch sees one, else the CPU; the choice is printed).",
)
@click.option("--seed", type=int, help="Reproducible audit (seeds trials and partition; not a release).")
@click.option("--out", type=click.Path(path_type=Path, file_okay=False), required=True, help="Output folder.")
@click.option(
    "--power-repetitions",
    type=int,
    default=20,
    show_default=True,
    help="Model mode: simulated audits per σ fraction when reporting the canary's power at 10⁴ trials.",
)
@round_options
@prepare_workers_option
@private_batch_size_option
@ray_options("each chunk's clipped vector (--sensitivity only)")
@click.option("--quiet", is_flag=True, help="No progress bar.")
def command(**options):
    """Estimate ε_lower, a confident empirical lower bound on the release's privacy loss, and
    compare it with the claimed ε. Writes audit.json, audit.md and audit.png to --out; exits with
    status 1 if any ε_lower exceeds its claim (a violation)."""
    from dpmtv.audit import AuditReport

    if options["sensitivity"]:
        _sensitivity(options)
        return
    if options["ray_address"] is not None:
        raise ParameterError("--ray is for --sensitivity (its chunk forward passes): add --sensitivity")
    if options["heads_from"] is not None or isinstance(options["l2_clip_norm"], str):
        raise ParameterError(
            "--heads-from private and --l2-clip-norm private/auto are for --sensitivity: add --sensitivity"
        )
    if options["model_path"] is None:
        points, settings = _synthetic(options)
        mode = "synthetic"
    else:
        points, settings = _model(options)
        mode = "model"
    report = AuditReport(mode, tuple(points), settings, family_confidence=options["confidence"])
    paths = report.write(options["out"])
    _print(report)
    for power in settings.get("canary_power", ()):
        caught = power["largest_fraction_flagged"]
        console.print(
            f"canary power at ε = {power['epsilon_claimed']:g}, 10⁴ trials: "
            + (f"flags a release with σ × {caught:g} or less" if caught else "flags no σ fraction tried"),
            highlight=False,
        )
    console.print(f"wrote {', '.join(str(p) for p in paths.values())}", highlight=False)
    if report.violations:
        err_console.print(
            f"[bold red]VIOLATION:[/] ε_lower exceeds ε_claimed at ε = "
            f"{', '.join(f'{p.epsilon_claimed:g}' for p in report.violations)}"
        )
        sys.exit(1)


def _common(options) -> dict:
    from dpmtv.audit import MECHANISMS
    from dpmtv.audit.report import bonferroni_confidence

    if options["trials"] < 20:
        raise ParameterError(f"--trials must be >= 20, got {options['trials']}")
    if not 0 < options["confidence"] < 1:
        raise ParameterError(f"--confidence must be in (0, 1), got {options['confidence']}")
    return {
        "delta": options["delta"],
        "trials": options["trials"],
        "mechanism": MECHANISMS[options["mechanism"]],
        "confidence": bonferroni_confidence(options["confidence"], len(options["epsilons"])),
    }


def _synthetic(options):
    from dpmtv._progress import progress_bar
    from dpmtv.audit import audit_synthetic

    given = [name for name in ("data_path", "head_spec") if options[name] is not None]
    if given:
        raise ParameterError(f"--{given[0].split('_')[0]} needs --model; omit it for the synthetic audit")
    clip = options["l2_clip_norm"] or (1.0,)
    if len(clip) != 1:
        raise ParameterError("synthetic mode takes one --l2-clip-norm")
    settings = {
        "num_chunks": options["num_chunks"] or 16,
        "shots_per_chunk": options["shots_per_chunk"] or 4,
        "layer_dims": dict.fromkeys(range(options["synthetic_layers"]), options["synthetic_dim"]),
        "l2_clip_norm": clip[0],
    }
    common = _common(options)
    points = []
    epsilons = options["epsilons"]
    with progress_bar("auditing (synthetic)", len(epsilons), enabled=not options["quiet"]) as advance:
        for index, epsilon in enumerate(epsilons):
            seed = None if options["seed"] is None else options["seed"] + index
            points.append(audit_synthetic(epsilon=epsilon, seed=seed, **settings, **common))
            advance(1)
    return points, {**settings, **_public(options, common)}


def _model(options):
    from dpmtv.audit.model import audit_model, canary_power, model_chunk_vectors
    from dpmtv.data import load_records
    from dpmtv.heads import parse_head_spec
    from dpmtv.privacy import parse_l2_clip_norms

    missing = [name for name in _MODEL_OPTIONS if options[name] is None]
    if missing:
        raise ParameterError(f"model mode needs --{missing[0].replace('_path', '').replace('_', '-')}")
    common = _common(options)
    records = load_records(options["data_path"])
    loaded = _load_model(options)
    heads = parse_head_spec(options["head_spec"], loaded.adapter.geometry)
    clip = parse_l2_clip_norms(list(options["l2_clip_norm"]), heads.layers)
    canary = model_chunk_vectors(
        loaded,
        records,
        heads,
        l2_clip_norms=clip,
        shots_per_chunk=options["shots_per_chunk"],
        query=options["query"],
        batch_size=options["batch_size"],
        seed=options["seed"],
    )
    points = audit_model(
        canary, l2_clip_norms=clip, epsilons=options["epsilons"], seed=options["seed"], **common
    )
    settings = {
        "model": options["model_path"],
        "heads": options["head_spec"],
        "num_chunks": canary.num_chunks,
        "shots_per_chunk": options["shots_per_chunk"],
        "l2_clip_norm": [clip[layer] for layer in heads.layers],
        "query": options["query"],
        "canary": canary.describe(),
        "canary_power": [
            canary_power(
                canary,
                l2_clip_norms=clip,
                epsilon=epsilon,
                delta=common["delta"],
                confidence=common["confidence"],
                trials=10_000,
                repetitions=options["power_repetitions"],
                seed=options["seed"],
            )
            for epsilon in options["epsilons"]
        ],
    }
    return points, {**settings, **_public(options, common)}


def _sensitivity(options) -> None:
    from dpmtv.audit.sensitivity import audit_sensitivity
    from dpmtv.data import load_records
    from dpmtv.heads import parse_head_spec

    needed = ("model_path", *(name for name in _MODEL_OPTIONS if name != "head_spec"))
    missing = [name for name in needed if options[name] is None]
    if missing:
        raise ParameterError(f"--sensitivity needs --{missing[0].replace('_path', '').replace('_', '-')}")
    check_ray_installed(options["ray_address"])
    records = load_records(options["data_path"])
    loaded = _load_model(options)
    settings = build_settings(options, **round_settings(loaded, options))
    spec = options["head_spec"]
    dtype, device = options["dtype"], options["device"]
    ray = (options["ray_address"], options["workers"], options["gpus_per_worker"])
    with ray_executor(*ray, loaded, dtype=dtype, device=device) as executor:
        audit = audit_sensitivity(
            loaded,
            records,
            None if spec is None else parse_head_spec(spec, loaded.adapter.geometry),
            settings,
            num_partitions=options["partitions"],
            neighbours_per_partition=options["neighbours"],
            seed=options["seed"] or 0,
            executor=executor,
        )
    paths = audit.write(options["out"])
    table = Table(title=f"sensitivity audit (per {audit.privacy_unit}, {audit.neighbouring_relation})")
    for column in ("change", "pairs", "worst ‖mean(D)−mean(D′)‖/Δ", "worst pair", "violations"):
        table.add_column(column, justify="right")
    for row in audit.rows():
        where = f"seed {row['worst_pair']['partition_seed']}, {row['worst_pair']['target']}"
        table.add_row(
            row["change"], str(row["pairs"]), f"{row['worst_ratio']:.4f}", where, str(row["violations"])
        )
    console.print(table)
    _print_rounds(audit)
    console.print(f"wrote {', '.join(str(p) for p in paths.values())}", highlight=False)
    if audit.violations:
        err_console.print(
            f"[bold red]VIOLATION:[/] {len(audit.violations)} pairs moved the mean by more than Δ "
            "(or a round's utility by more than Δ∞)"
        )
        sys.exit(1)


def _print_rounds(audit) -> None:
    """The private rounds' rows (none for a build with given heads and C)."""
    rows = audit.round_rows()
    if not rows:
        return
    table = Table(title="private rounds: max over candidates |u(D) − u(D′)| / Δ∞")
    for column in ("round", "change", "pairs", "worst ratio", "Δ∞", "worst pair", "violations"):
        table.add_column(column, justify="right")
    for row in rows:
        where = f"seed {row['worst_pair']['partition_seed']}, {row['worst_pair']['target']}"
        table.add_row(
            row["round"],
            row["change"],
            str(row["pairs"]),
            f"{row['worst_ratio']:.4f}",
            f"{row['linf_sensitivity']:g}",
            where,
            str(row["violations"]),
        )
    console.print(table)
    console.print(
        "the release is measured at the heads and C each partition's rounds chose on D "
        "(sensitivity.json: chosen_on_d)",
        highlight=False,
    )


def _public(options, common) -> dict:
    return {
        "trials": common["trials"],
        "delta": common["delta"],
        "confidence": options["confidence"],
        "per_point_confidence": common["confidence"],
        "multiple_testing_correction": f"bonferroni over {len(options['epsilons'])} ε values",
        "mechanism": options["mechanism"],
        "seed": options["seed"],
        "noise_sampler": "seeded-numpy" if options["seed"] is not None else "csprng-numpy",
    }


def _print(report) -> None:
    table = Table(title=f"privacy audit ({report.mode}, mechanism {report.points[0].mechanism})")
    for column in report.HEADER:
        table.add_column(column, justify="right")
    for row in report.rows():
        style = "bold red" if row[-1] == "VIOLATION" else None
        table.add_row(*row, style=style)
    console.print(table)


def _load_model(options):
    from dpmtv.models.loading import load_model

    if options["device"] == "auto":
        announce_auto_device()
    return load_model(options["model_path"], dtype=options["dtype"], device=options["device"])
