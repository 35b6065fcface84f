"""Shared pieces of the command line: consoles, error display, option parsers."""

from __future__ import annotations

import functools

import click
from rich.console import Console
from rich.table import Table

from dpmtv.errors import DpmtvError

console = Console(stderr=False)
err_console = Console(stderr=True)


class DpmtvCommandError(click.ClickException):
    exit_code = 2

    def show(self, file=None) -> None:
        err_console.print(f"[bold red]error:[/] {self.format_message()}", highlight=False, soft_wrap=True)


class DpmtvGroup(click.Group):
    """Turns the library's own errors into one clear line and exit code 2, no traceback."""

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except DpmtvError as exc:
            raise DpmtvCommandError(str(exc)) from exc


DTYPES = ("float32", "bfloat16", "float16")


def model_options(function):
    """``--model``, ``--dtype``, ``--device``, ``--adapter`` and ``--trust-remote-code``: shared by
    every command that loads a model. The last two reach ``load_model`` through
    ``remote_code_options``, so the commands' own signatures do not change."""

    command = function

    @functools.wraps(command)
    def with_remote_code_options(*args, adapter_spec, trust_remote_code, **kwargs):
        from dpmtv.models.loading import remote_code_options

        with remote_code_options(adapter_spec=adapter_spec, trust_remote_code=trust_remote_code):
            return command(*args, **kwargs)

    function = click.option(
        "--trust-remote-code",
        is_flag=True,
        help="Run the checkpoint's own Python code (transformers' trust_remote_code=True); only "
        "for checkpoints whose source you trust.",
    )(with_remote_code_options)
    function = click.option(
        "--adapter",
        "adapter_spec",
        type=click.Path(exists=True, dir_okay=False),
        help="Adapter spec (JSON) for a checkpoint transformers cannot load natively, e.g. "
        "docs/adapters/qwen-vl-chat.json.",
    )(function)
    function = click.option("--device", default="cpu", show_default=True, help="torch device, e.g. cuda:0.")(
        function
    )
    function = click.option(
        "--dtype", default="float32", show_default=True, type=click.Choice(DTYPES), help="Weights dtype."
    )(function)
    return click.option(
        "--model",
        "model_path",
        default="embedded",
        show_default=True,
        help="Local checkpoint folder, hub id, or 'embedded' (the packaged model).",
    )(function)


def float_list(ctx, param, value: str | None) -> tuple[float, ...] | None:
    """Click callback: '1.5' or '1,2,3' → a tuple of floats."""
    if value is None:
        return None
    try:
        return tuple(float(part) for part in value.split(","))
    except ValueError:
        raise click.BadParameter(f"'{value}' is not a number or comma-separated numbers") from None


def print_vector_summary(metadata, *, path) -> None:
    p = metadata.privacy
    table = Table(title=f"task vector {path}" if path else "task vector", show_header=False)
    guarantee = (
        f"({p.epsilon:g}, {p.delta:g})-DP per {p.privacy_unit}, {p.neighbouring_relation}"
        if p.private
        else "[bold red]NON-PRIVATE (ε = ∞): no privacy guarantee[/]"
    )
    rows = [
        ("guarantee", guarantee),
        ("ε spent (accountant)", f"{p.epsilon_spent:.6g}"),
        ("model", f"{metadata.model['architecture']} ({metadata.model['name_or_path']})"),
        ("heads", f"{len(metadata.heads)} heads in {len({h[0] for h in metadata.heads})} layers"),
        (
            "chunks m × shots s",
            f"{p.num_chunks} × {p.shots_per_chunk}"
            + (f" ({p.num_unused_records} records unused)" if p.num_unused_records else ""),
        ),
        ("L2 clip norm", ", ".join(f"{c:g}" for c in sorted(set(p.l2_clip_norm)))),
        ("L2 sensitivity Δ", f"{p.l2_sensitivity:.6g}"),
        (
            "noise std σ",
            f"{p.noise_std:.6g}"
            + (f" (analytic {p.noise_std_analytic:.6g}" if p.noise_std_analytic else "")
            + (
                f", sampler map {p.noise_std_sampler_map:.6g})"
                if p.noise_std_sampler_map
                else (")" if p.noise_std_analytic else "")
            ),
        ),
        (
            "noise sampler",
            p.noise_sampler
            + ("" if p.secure_noise or not p.private else f" [bold red]INSECURE seed {p.insecure_seed}[/]"),
        ),
        ("query / centring", f"{metadata.prompt.get('query')} / {metadata.prompt.get('center')}"),
        (
            "library",
            f"dpmtv {metadata.library_version}, format {metadata.format_version}, {metadata.created_at}",
        ),
    ]
    for key, value in rows:
        table.add_row(key, value)
    console.print(table)
