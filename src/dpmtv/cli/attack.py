"""``dpmtv attack``: membership inference against many-shot ICL and against DP-MTV."""

from __future__ import annotations

from pathlib import Path

import click
from rich.table import Table

from dpmtv.cli._common import (
    build_settings,
    clip_norms_or_auto,
    console,
    err_console,
    model_options,
    prepare_workers_option,
)
from dpmtv.pipeline.defaults import DEFAULT_CLIP_QUANTILE


@click.command(name="attack")
@model_options
@click.option("--data", "data_path", type=click.Path(path_type=Path), help="Member (private) records.")
@click.option(
    "--non-members", "non_members_path", type=click.Path(path_type=Path), help="Non-member records."
)
@click.option(
    "--embedded-task",
    help="Instead of --data/--non-members: generate members and non-members of this embedded task "
    "(e.g. name_colour) with randomised labels; no files needed.",
)
@click.option("--num-members", type=int, default=64, show_default=True, help="Embedded mode: members.")
@click.option(
    "--num-non-members", type=int, default=64, show_default=True, help="Embedded mode: non-members."
)
@click.option(
    "--label-noise",
    type=float,
    help="Probability that a record's answer is redrawn uniformly at random (independent of its "
    "image), so only the prompt can reveal it [embedded: 1.0, files: 0].",
)
@click.option(
    "--label-vocabulary",
    type=click.Choice(["task", "all"]),
    default="task",
    show_default=True,
    help="Embedded mode: redraw answers from the task's words or every embedded answer word (with "
    "files: the answers found in both files).",
)
@click.option("--heads", "head_spec", required=True, help="Head spec of the DP-MTV vector, as for build.")
@click.option("--epsilon", type=float, default=1.0, show_default=True, help="ε of the DP-MTV build.")
@click.option("--delta", type=float, default=1e-5, show_default=True, help="δ of the DP-MTV build.")
@click.option(
    "--l2-clip-norm",
    callback=clip_norms_or_auto,
    required=True,
    help="C per layer (one or one per layer), or 'auto': the --clip-quantile of chunk-vector norms "
    "on public records (embedded: generated; files: --public-data).",
)
@click.option(
    "--public-data", type=click.Path(path_type=Path), help="Public records for --l2-clip-norm auto."
)
@click.option(
    "--num-public",
    type=int,
    default=64,
    show_default=True,
    help="Embedded mode: public records (for 'auto' clip norms; --shadow raises it to --num-members).",
)
@click.option(
    "--clip-quantile",
    type=float,
    default=DEFAULT_CLIP_QUANTILE,
    show_default=True,
    help="For --l2-clip-norm auto.",
)
@click.option("--shots-per-chunk", type=int, required=True, help="Records per chunk s of the build.")
@click.option("--query", default="record", show_default=True, help="Chunk query of the build, as for build.")
@click.option(
    "--icl-shots",
    type=int,
    help="Demonstrations per ICL prompt [as many as the context allows]; members are split into "
    "as few prompts as needed.",
)
@click.option(
    "--non-private-mtv",
    is_flag=True,
    help="Also attack the same build WITHOUT noise (ε = ∞, a labelled non-private control).",
)
@click.option(
    "--shadow",
    is_flag=True,
    help="Add the 'shadow' statistic: every target rebuilt from public records (embedded: "
    "generated, at least --num-members; files: --public-data) as a per-record reference.",
)
@click.option("--target-fpr", type=float, default=0.01, show_default=True, help="For TPR at low FPR.")
@click.option("--bootstrap", type=int, default=2000, show_default=True, help="Bootstrap resamples (AUC CI).")
@click.option("--confidence", type=float, default=0.95, show_default=True, help="Of the AUC interval.")
@click.option(
    "--noise-sampler", type=click.Choice(["opendp", "csprng-numpy"]), default="opendp", show_default=True
)
@click.option("--batch-size", type=int, default=8, show_default=True)
@click.option("--seed", type=int, default=0, show_default=True, help="Attack randomness and embedded data.")
@click.option("--out", type=click.Path(path_type=Path, file_okay=False), required=True, help="Output folder.")
@prepare_workers_option
@click.option("--quiet", is_flag=True, help="No progress bars.")
def command(**options):
    """Membership-inference attack against plain many-shot ICL (members in the prompt) and the
    model with a DP-MTV vector built from the same members: scores each member's and non-member's
    own answer (log-probability), reports ROC AUC with a bootstrap CI and TPR at low FPR. Writes
    membership.json, membership.md and membership_roc.png to --out. The report is NOT private: it
    holds statistics of the member records."""
    from dpmtv.audit.membership import AttackSettings, run_membership_attack
    from dpmtv.heads import parse_head_spec
    from dpmtv.models.loading import load_model

    _check_mode(options)
    loaded = load_model(options["model_path"], dtype=options["dtype"], device=options["device"])
    heads = parse_head_spec(options["head_spec"], loaded.adapter.geometry)
    data = _data(options)
    clip = options["l2_clip_norm"]
    if clip == "auto":
        clip = _auto_clip(loaded, heads, data.public, options)
    settings = build_settings(
        options, l2_clip_norm=tuple(clip), head_selection={"method": "user", "spec": options["head_spec"]}
    )
    description = {**data.description, "l2_clip_norm_source": _clip_source(options)}
    attack = AttackSettings(
        build=settings,
        heads=heads,
        icl_shots=options["icl_shots"],
        non_private_mtv=options["non_private_mtv"],
        target_fpr=options["target_fpr"],
        confidence=options["confidence"],
        bootstrap_resamples=options["bootstrap"],
        batch_size=options["batch_size"],
        seed=options["seed"],
        data_description=description,
        progress=not options["quiet"],
    )
    shadow = data.public if options["shadow"] else None
    report = run_membership_attack(loaded, data.members, data.non_members, attack, shadow=shadow)
    paths = report.write(options["out"])
    _print(report)
    console.print(f"wrote {', '.join(str(p) for p in paths.values())}", highlight=False)


def _check_mode(options) -> None:
    from dpmtv.errors import ParameterError

    if options["l2_clip_norm"] == "private":
        raise ParameterError("dpmtv attack takes --l2-clip-norm as numbers or 'auto', not 'private'")
    files = [options["data_path"], options["non_members_path"]]
    if options["embedded_task"] is not None:
        if any(path is not None for path in files):
            raise ParameterError("--embedded-task generates the records: omit --data and --non-members")
    elif any(path is None for path in files):
        raise ParameterError("give --data and --non-members, or --embedded-task NAME")
    if options["embedded_task"] is None and not options["public_data"]:
        for flag, used in (
            ("--l2-clip-norm auto", options["l2_clip_norm"] == "auto"),
            ("--shadow", options["shadow"]),
        ):
            if used:
                raise ParameterError(f"{flag} needs --public-data (public records) with --data")


def _data(options):
    from dpmtv.audit.membership import MembershipData, embedded_membership_data, randomise_labels
    from dpmtv.data import load_records

    noise = options["label_noise"]
    if options["embedded_task"] is not None:
        public = options["num_public"] if options["l2_clip_norm"] == "auto" else 0
        if options["shadow"]:
            public = max(public, options["num_members"])
        return embedded_membership_data(
            options["embedded_task"],
            num_members=options["num_members"],
            num_non_members=options["num_non_members"],
            num_public=public,
            label_noise=1.0 if noise is None else noise,
            label_vocabulary=options["label_vocabulary"],
            seed=options["seed"],
        )
    members = load_records(options["data_path"])
    non_members = load_records(options["non_members_path"])
    public = load_records(options["public_data"]) if options["public_data"] else []
    noise = 0.0 if noise is None else noise
    vocabulary = sorted({r.answer for r in (*members, *non_members)})
    if noise > 0:
        import numpy as np

        rng = np.random.default_rng([options["seed"], 2])
        members, non_members, public = (
            randomise_labels(part, vocabulary=vocabulary, noise=noise, rng=rng)
            for part in (members, non_members, public)
        )
    description = {
        "source": "files",
        "members": str(options["data_path"]),
        "non_members": str(options["non_members_path"]),
        "label_noise": noise,
        "label_vocabulary_size": len(vocabulary),
    }
    return MembershipData(members, non_members, public, description)


def _auto_clip(loaded, heads, public, options) -> tuple[float, ...]:
    from dpmtv.pipeline.public_clip import public_clip_norms

    norms = public_clip_norms(
        loaded,
        public,
        heads,
        shots_per_chunk=options["shots_per_chunk"],
        query=options["query"],
        quantile=options["clip_quantile"],
        batch_size=options["batch_size"],
    )
    if not options["quiet"]:
        err_console.print(
            f"clip norms from {len(public)} public records (quantile {options['clip_quantile']:g}): "
            + ", ".join(f"{c:.4g}" for c in norms),
            highlight=False,
        )
    return norms


def _clip_source(options) -> str:
    if options["l2_clip_norm"] != "auto":
        return "user"
    return f"public quantile {options['clip_quantile']:g}"


def _print(report) -> None:
    first = report.metrics[0]
    table = Table(
        title=f"membership inference ({first.num_members} members, {first.num_non_members} non-members)"
    )
    for column in ("target", "statistic", "AUC [CI]", f"TPR@{first.target_fpr:g}FPR", "p", "own m/n"):
        table.add_column(column, justify="right")
    for row in report.rows():
        table.add_row(row[0], row[1], f"{row[2]} {row[3]}", row[4], row[6], row[9])
    console.print(table)
