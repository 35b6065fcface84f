"""``--config FILE`` and ``--print-config`` for any command (``build``, ``serve``, ``eval``, ``demo``).

``--config cmd.toml`` fills the command's options from a TOML table whose keys are the option
names (``epsilon``, ``l2-clip-norm`` or ``l2_clip_norm``, ...); options given on the command line
(or as ``DPMTV_<COMMAND>_*`` variables) win, as click's ``default_map`` does. ``--print-config``
writes such a file: every option with the value it would take (its default, or the value from a
``--config`` given anywhere on the command line) and exits.

Every value is checked against its option before anything runs: a file that is not UTF-8 TOML, a
key that is no option, or a value of the wrong TOML type (a list or table for a single value, a
date, a boolean for a number, a fraction for a whole number, a number for a path) is refused in
one ``error:`` line naming the file, the key and the value, exit code 2.
"""

from __future__ import annotations

import datetime
import json
import math
from typing import Any

import click

try:  # click >= 8.2 marks an option without a default with its own sentinel
    from click._utils import UNSET as _UNSET
except ImportError:  # older click: None
    _UNSET = None

_OWN_KEYS = ("config", "print-config", "print_config")


class ConfigFileError(click.ClickException):
    """A config file that cannot be used: one ``error:`` line, exit code 2 (a usage error)."""

    exit_code = 2


def config_options(function):
    """Decorate a command with ``--config FILE`` and ``--print-config``."""
    function = click.option(
        "--print-config",
        is_flag=True,
        expose_value=False,
        callback=_print_config,
        help="Print every option as a TOML config file (with the values of a --config, wherever it "
        "is given) and exit.",
    )(function)
    return click.option(
        "--config",
        type=click.Path(exists=True, dir_okay=False),
        is_eager=True,
        expose_value=False,
        callback=_read_config,
        help="TOML file of this command's options (keys: option names); options on the command line win.",
    )(function)


def _read_config(ctx: click.Context, param: click.Parameter, value: str | None) -> None:
    """``--config FILE``: its checked table becomes the command's ``default_map`` (flags still win).

    The option is eager and ``--print-config`` is not, so the file is read before the table is
    printed whatever their order on the command line."""
    if value is None:
        return
    names = {option_name(p): p for p in ctx.command.params if isinstance(p, click.Option)}
    names.update({str(p.name): p for p in ctx.command.params if isinstance(p, click.Option)})
    defaults = dict(ctx.default_map or {})
    for key, item in _load_table(value).items():
        option = names.get(key)
        if option is None or key in _OWN_KEYS:
            command = f"dpmtv {ctx.info_name}"
            raise ConfigFileError(f"'{value}': '{key}' is not an option of {command} (see {command} --help)")
        defaults[str(option.name)] = _checked(ctx, option, item, where=f"'{value}': key '{key}'")
    ctx.default_map = defaults


def _load_table(path: str) -> dict[str, Any]:
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10
        import tomli as tomllib

    try:
        with open(path, "rb") as file:
            return tomllib.loads(file.read().decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise ConfigFileError(
            f"'{path}' is not UTF-8 text (byte {exc.object[exc.start]:#04x} at offset {exc.start}); "
            "save the config file as UTF-8"
        ) from None
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise ConfigFileError(f"cannot read '{path}': {exc}") from None


def _checked(ctx: click.Context, option: click.Option, value: Any, *, where: str) -> Any:
    """``value`` from a TOML file for ``option``, as the option takes it (an integral float for a
    whole number becomes an int); anything of the wrong TOML type is refused naming ``where``."""
    if option.multiple or option.nargs != 1:
        if not isinstance(value, list):
            raise ConfigFileError(f"{where} = {_shown(value)}: expected a list, e.g. [{_example(option)}]")
        checked: Any = [_scalar(option, item, where=where) for item in value]
    else:
        checked = _scalar(option, value, where=where)
    try:
        option.type_cast_value(ctx, checked)  # choices, ranges and paths, as click would check them
    except click.BadParameter as exc:
        raise ConfigFileError(f"{where} = {_shown(value)}: {exc.message}") from None
    return checked


def _scalar(option: click.Option, value: Any, *, where: str) -> Any:
    kind = option.type
    if isinstance(value, dict | list) or isinstance(value, datetime.date | datetime.time):
        what = {dict: "a table", list: "a list"}.get(type(value), "a date or time")
        raise ConfigFileError(f"{where} = {_shown(value)} is {what}; expected {_expected(option)}")
    if option.is_flag or isinstance(kind, click.types.BoolParamType):
        if isinstance(value, bool):
            return value
    elif isinstance(kind, click.types.IntParamType):  # IntRange too
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        if isinstance(value, float) and math.isfinite(value) and value.is_integer():
            return int(value)
    elif isinstance(kind, click.types.FloatParamType):  # FloatRange too
        if isinstance(value, int | float) and not isinstance(value, bool):
            return value
    elif isinstance(kind, click.Path | click.File | click.Choice):
        if isinstance(value, str):
            return value
    elif isinstance(value, str) or (isinstance(value, int | float) and not isinstance(value, bool)):
        return value  # free text: a number is read as its text (e.g. l2-clip-norm = 5)
    raise ConfigFileError(f"{where} = {_shown(value)}: expected {_expected(option)}")


def _expected(option: click.Option) -> str:
    kind = option.type
    if option.is_flag or isinstance(kind, click.types.BoolParamType):
        return "true or false"
    if isinstance(kind, click.types.IntParamType):
        return "a whole number"
    if isinstance(kind, click.types.FloatParamType):
        return "a number"
    if isinstance(kind, click.Path | click.File):
        return 'a path in quotes (e.g. "task.safetensors")'
    if isinstance(kind, click.Choice):
        return "one of " + ", ".join(f'"{choice}"' for choice in kind.choices)
    return "text in quotes"


def _example(option: click.Option) -> str:
    return "1, 2" if isinstance(option.type, click.types.IntParamType | click.types.FloatParamType) else '"…"'


def _shown(value: Any) -> str:
    """A TOML value as the file spelled it (dates as their ISO text)."""
    if isinstance(value, datetime.date | datetime.time):
        return value.isoformat()
    return _toml_value(value) if not isinstance(value, dict) else json.dumps(value, default=str)


def option_name(param: click.Parameter) -> str:
    long = [opt for opt in getattr(param, "opts", []) if opt.startswith("--")]
    return long[0][2:] if long else str(param.name)


def _print_config(ctx: click.Context, param: click.Parameter, value: bool) -> None:
    """``--print-config``: every option with the value it would take, as TOML, then exit."""
    if not value:
        return
    lines = [f"# dpmtv {ctx.info_name} --config FILE; options given on the command line win"]
    for p in ctx.command.params:
        if not isinstance(p, click.Option) or p.name in ("config", "print_config", "help") or p.hidden:
            continue
        default = (ctx.default_map or {}).get(p.name, p.get_default(ctx, call=True))
        key = option_name(p)
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
