"""``dpmtv build``'s config file, its JSON summary and its grouped ``--help``.

``--config build.toml`` fills every build option from a TOML table whose keys are the option
names (``epsilon``, ``l2-clip-norm`` or ``l2_clip_norm``, ...); options given on the command line
(or as ``DPMTV_BUILD_*`` variables) win, as click's ``default_map`` does. ``--print-config``
writes such a file: every option with the value it would take (its default, or the value from a
``--config`` given before it). The artifact records what the build resolved to: its metadata
holds every public setting that shapes the result (docs/design.md §9); file paths are not stored.
"""

from __future__ import annotations

import json
from typing import Any

import click

try:  # click >= 8.2 marks an option without a default with its own sentinel
    from click._utils import UNSET as _UNSET
except ImportError:  # older click: None
    _UNSET = None

# (group, option names) in the order `dpmtv build --help` shows them
HELP_GROUPS = (
    ("Model", ("model", "dtype", "device", "adapter", "trust-remote-code", "revision",
               "attn-implementation", "adapter-weights")),
    ("Data", ("data", "query", "query-question", "center", "public-data", "max-prompt-tokens", "batch-size")),
    ("Privacy", ("epsilon", "delta", "l2-clip-norm", "clip-quantile", "clip-epsilon-fraction",
                 "clip-utility", "clip-tolerance", "shots-per-chunk",
                 "neighbouring-relation", "num-chunks", "privacy-unit", "max-records-per-user",
                 "show-private-counts", "noise-sampler", "insecure-seeded-noise", "non-private")),
    ("Heads", ("heads", "heads-from", "select-k", "select-method", "selection-fraction",
               "selection-composition", "select-pool", "private-selection", "selection-candidates",
               "selection-utility")),
    ("Output", ("out", "force", "json", "quiet", "config", "print-config")),
    ("Ledger", ("dataset", "ledger", "ledger-timeout", "void-budget")),
    ("Distributed", ("ray", "workers", "gpus-per-worker")),
)  # fmt: skip
EXAMPLES = """\b
Examples:
  dpmtv build --model /models/Qwen2-VL-2B-Instruct --data private/records.jsonl \\
      --heads layers:8-15 --epsilon 1 --delta 1e-5 --l2-clip-norm 5 --shots-per-chunk 8 \\
      --out task.safetensors
  dpmtv build --print-config > build.toml     # edit it, then:
  dpmtv build --config build.toml --epsilon 2 --json   # flags override the file"""


class GroupedHelpCommand(click.Command):
    """A command whose ``--help`` lists its options under the headings of :data:`HELP_GROUPS`."""

    def format_options(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        records = {_option_name(p): p.get_help_record(ctx) for p in self.get_params(ctx)}
        shown: set[str] = set()
        for title, names in HELP_GROUPS:
            rows = [records[name] for name in names if records.get(name)]
            shown.update(names)
            if rows:
                with formatter.section(title):
                    formatter.write_dl(rows)
        rest = [record for name, record in records.items() if record and name not in shown]
        if rest:
            with formatter.section("Other"):
                formatter.write_dl(rest)


def _option_name(param: click.Parameter) -> str:
    long = [opt for opt in getattr(param, "opts", []) if opt.startswith("--")]
    return long[0][2:] if long else str(param.name)


def _read_config(ctx: click.Context, param: click.Parameter, value: str | None) -> None:
    """``--config FILE``: its table becomes the command's ``default_map`` (flags still win)."""
    if value is None:
        return
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10
        import tomli as tomllib

    try:
        with open(value, "rb") as file:
            table = tomllib.load(file)
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise click.BadParameter(f"cannot read '{value}': {exc}", ctx=ctx, param=param) from None
    names = {_option_name(p): p.name for p in ctx.command.params if p.name}
    names.update({p.name: p.name for p in ctx.command.params if p.name})
    defaults = dict(ctx.default_map or {})
    for key, item in table.items():
        name = names.get(key)
        if name is None or key in ("config", "print-config", "print_config"):
            raise click.BadParameter(
                f"'{value}': '{key}' is not a build option (see dpmtv build --help)", ctx=ctx, param=param
            )
        defaults[name] = item
    ctx.default_map = defaults


def _print_config(ctx: click.Context, param: click.Parameter, value: bool) -> None:
    """``--print-config``: every option with the value it would take, as TOML, then exit."""
    if not value:
        return
    lines = ["# dpmtv build --config FILE; options given on the command line win"]
    for p in ctx.command.params:
        if not isinstance(p, click.Option) or p.name in ("config", "print_config", "help"):
            continue
        default = (ctx.default_map or {}).get(p.name, p.get_default(ctx, call=True))
        key = _option_name(p)
        unset = default is None or default is _UNSET
        lines.append(f"# {key} =" if unset else f"{key} = {_toml_value(default)}")
    click.echo("\n".join(lines))
    ctx.exit(0)


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, tuple | list):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    if isinstance(value, int | float) and not isinstance(value, bool):
        return repr(value) if value == value and abs(value) != float("inf") else json.dumps(str(value))
    return json.dumps(str(value))


def config_options(function):
    function = click.option(
        "--print-config",
        is_flag=True,
        is_eager=True,
        expose_value=False,
        callback=_print_config,
        help="Print every option as a TOML config file (after a --config, with its values) and exit.",
    )(function)
    return click.option(
        "--config",
        type=click.Path(exists=True, dir_okay=False),
        is_eager=True,
        expose_value=False,
        callback=_read_config,
        help="TOML file of build options (keys: option names); options on the command line win.",
    )(function)


def print_json_summary(path: Any, *, ledger_status: Any = None) -> None:
    """``--json``: the build's summary as one JSON object on stdout (the written artifact's
    metadata, read back as it is on disk, its path, its card's and signature's paths (null: not
    signed) and the dataset's ledger status when one was charged)."""
    from dpmtv.artifact.card import card_path
    from dpmtv.artifact.signature import signature_path
    from dpmtv.artifact.vector import load_task_vector

    metadata = load_task_vector(path).metadata
    signature = signature_path(path)
    summary: dict[str, Any] = {
        "path": str(path),
        "card": str(card_path(path)),
        "signature": str(signature) if signature.is_file() else None,
        "metadata": json.loads(metadata.model_dump_json()),
    }
    if ledger_status is not None:
        summary["ledger"] = {
            "dataset": ledger_status.name,
            "epsilon_spent": ledger_status.epsilon_spent,
            "epsilon_budget": ledger_status.epsilon_budget,
            "delta": ledger_status.delta,
            "void": bool(ledger_status.void),
        }
    click.echo(json.dumps(summary))
