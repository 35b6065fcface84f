"""``dpmtv budget``: create dataset budgets and show what the ledger has charged (see
``docs/design.md``, "The budget ledger")."""

from __future__ import annotations

import json
from pathlib import Path

import click
from platformdirs import user_data_dir
from rich.table import Table

from dpmtv.cli._common import console
from dpmtv.errors import ParameterError

LEDGER_FILE = "ledger.sqlite"


def default_ledger_path() -> Path:
    """``<user data dir>/ledger.sqlite`` (platformdirs), e.g. ``~/.local/share/dpmtv/ledger.sqlite``."""
    return Path(user_data_dir("dpmtv")) / LEDGER_FILE


def ledger_option(function):
    """The shared ``--ledger PATH`` option (None means :func:`default_ledger_path`)."""
    return click.option(
        "--ledger",
        "ledger_path",
        type=click.Path(path_type=Path, dir_okay=False),
        default=None,
        help=f"Budget ledger (SQLite). Default: {default_ledger_path()}.",
    )(function)


def open_ledger(ledger_path: Path | None):
    """The :class:`~dpmtv.ledger.book.Ledger` at ``ledger_path`` or the default path."""
    from dpmtv.ledger.book import Ledger

    return Ledger(ledger_path if ledger_path is not None else default_ledger_path())


def resolve_build_ledger(ledger_path: Path | None, dataset: str | None):
    """For ``build``: ``(ledger, dataset)`` to charge, or None when neither option is given.

    ``--dataset NAME`` alone uses the default ledger; ``--ledger`` without ``--dataset`` is refused
    (a charge needs to know which budget to take from).
    """
    if dataset is None:
        if ledger_path is not None:
            raise ParameterError("--ledger needs --dataset NAME: the dataset budget to charge")
        return None
    return open_ledger(ledger_path), dataset


@click.group(name="budget")
def command() -> None:
    """Privacy-budget ledger: per-dataset (ε, δ) budgets that builds charge."""


@command.command(name="init")
@click.argument("name")
@click.option("--epsilon", type=float, required=True, help="Total ε budget of the dataset (> 0).")
@click.option("--delta", type=float, required=True, help="δ at which all releases are composed, in (0, 1).")
@click.option(
    "--neighbouring-relation",
    type=click.Choice(["replace-one", "add-remove-one"]),
    help="The relation every build charged to NAME must use (as `dpmtv build --neighbouring-relation`; "
    "default: the unit's own, replace-one for records, add-remove-one for users).",
)
@click.option(
    "--privacy-unit",
    type=click.Choice(["record", "user"]),
    default="record",
    show_default=True,
    help="The privacy unit every build charged to NAME must use (as `dpmtv build --privacy-unit`).",
)
@ledger_option
def init(name, epsilon, delta, neighbouring_relation, privacy_unit, ledger_path):
    """Create dataset NAME with budget (ε, δ) under one neighbouring relation and privacy unit.

    All of them are fixed: a build under another relation or unit is refused, since releases
    under different relations do not compose into one guarantee."""
    from dpmtv.pipeline.settings import relation_for_unit

    ledger = open_ledger(ledger_path)
    status = ledger.init_dataset(
        name,
        epsilon=epsilon,
        delta=delta,
        neighbouring_relation=relation_for_unit(privacy_unit, neighbouring_relation).value,
        privacy_unit=privacy_unit,
    )
    console.print(
        f"dataset [bold]{status.name}[/]: budget ε = {status.epsilon_budget:g} at δ = {status.delta:g}, "
        f"{status.neighbouring_relation} per {status.privacy_unit}, in ledger {ledger.path}",
        highlight=False,
    )


@command.command(name="show")
@click.argument("name", required=False)
@ledger_option
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
def show(name, ledger_path, as_json):
    """Show every dataset's budget, or NAME's budget and charges."""
    ledger = open_ledger(ledger_path)
    statuses = [ledger.status(name)] if name else [ledger.status(n) for n in ledger.datasets()]
    if as_json:
        data = statuses[0].to_json() if name else [s.to_json() for s in statuses]
        click.echo(json.dumps(data, indent=2))
    elif name:
        _print_dataset(statuses[0], ledger.path)
    else:
        _print_overview(statuses, ledger.path)


def _print_overview(statuses, path) -> None:
    table = Table(title=f"privacy budgets in {path}")
    for column in ("dataset", "relation", "ε budget", "δ", "ε spent", "ε remaining", "charges"):
        table.add_column(column, justify="left" if column in ("dataset", "relation") else "right")
    for s in statuses:
        table.add_row(
            s.name + (" [bold red]VOID[/]" if s.void else ""),
            f"{s.neighbouring_relation} per {s.privacy_unit}",
            f"{s.epsilon_budget:g}",
            f"{s.delta:g}",
            _epsilon_text(s.epsilon_spent),
            _epsilon_text(s.epsilon_headroom),
            str(len(s.charges)),
        )
    console.print(table)


def _print_dataset(status, path) -> None:
    from dpmtv.privacy.disjoint import DisjointReleases

    summary = Table(title=f"dataset {status.name} ({path})", show_header=False)
    if status.void:
        summary.add_row(
            "guarantee",
            "[bold red]VOID[/]: a build without a privacy guarantee used this dataset "
            "(see voids below); no ε below is a guarantee any more",
        )
    summary.add_row("budget", f"ε = {status.epsilon_budget:g} at δ = {status.delta:g}")
    summary.add_row("relation", f"{status.neighbouring_relation} per {status.privacy_unit}")
    summary.add_row("spent (PLD composition)", f"ε = {_epsilon_text(status.epsilon_spent)}")
    summary.add_row("remaining", f"ε = {_epsilon_text(status.epsilon_headroom)}")
    summary.add_row("created", _time_text(status.created_at))
    console.print(summary)
    charges = Table(title="charges")
    for column in ("#", "charged at", "ε after", "written"):
        charges.add_column(column, no_wrap=True, overflow="fold")  # a cut timestamp is no timestamp
    for index, charge in enumerate(status.charges, start=1):
        charges.add_row(
            str(index),
            _time_text(charge.charged_at),
            _epsilon_text(charge.epsilon_after)
            + (" (parallel)" if isinstance(charge.event, DisjointReleases) else ""),
            _time_text(charge.written_at) if charge.written_at else "[yellow]not written[/]",
        )
    console.print(charges)
    _print_artifacts("charge", status.charges)
    if status.voids:
        console.print("[bold red]voids[/] (builds without a privacy guarantee):")
        for index, void in enumerate(status.voids, start=1):
            console.print(
                f"  void #{index} at {_time_text(void.voided_at)}: {void.reason}",
                soft_wrap=True,
                highlight=False,
            )
        _print_artifacts("void", status.voids)


def _print_artifacts(kind, entries) -> None:
    """Full artifact paths and tensor hashes, unwrapped (to copy, or to compare with `inspect`)."""
    for index, entry in enumerate(entries, start=1):
        console.print(
            f"{kind} #{index}: artifact {entry.artifact or '-'}\n"
            f"{' ' * len(kind)}     tensors sha256 {entry.tensors_sha256 or '- (not written)'}",
            soft_wrap=True,
            highlight=False,
        )


def _epsilon_text(epsilon: float) -> str:
    """Every ε of the ledger (spent, remaining, after a charge) with the same four decimals."""
    return f"{epsilon:.4f}"


def _time_text(stamp: str) -> str:
    """A stored ISO timestamp in UTC to the second, e.g. '2026-12-01 14:01:32 UTC' (``--json``
    keeps the stored microseconds)."""
    from datetime import datetime, timezone

    moment = datetime.fromisoformat(stamp).astimezone(timezone.utc)
    return moment.strftime("%Y-%m-%d %H:%M:%S UTC")
