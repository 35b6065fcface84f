"""Shared pieces of the command line: consoles, error display, option parsers."""

from __future__ import annotations

import contextlib
import functools
import warnings
from collections.abc import Iterator, Mapping
from typing import Any

import click
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from dpmtv.errors import DpmtvError, HeadSpecError, ParameterError
from dpmtv.heads import HeadSet

console = Console(stderr=False)
err_console = Console(stderr=True)  # progress, warnings and errors: stdout stays for results
_warnings_shown: set[str] = set()


USAGE_ERROR_EXIT = 2  # click's convention: the command line itself is wrong
FAILURE_EXIT = 1  # a refusal or a failure of a well-formed command (docs/cli.md)
# Library errors that say an option's value or combination is wrong: usage errors. Every other
# DpmtvError (a record, a ledger, the model, an artifact, a privacy refusal) is a failure.
_USAGE_ERRORS = (ParameterError, HeadSpecError)


class DpmtvCommandError(click.ClickException):
    """A library error shown as one ``error:`` line; exit 2 for usage errors, else 1."""

    def __init__(self, error: DpmtvError):
        super().__init__(str(error))
        self.exit_code = USAGE_ERROR_EXIT if isinstance(error, _USAGE_ERRORS) else FAILURE_EXIT

    def show(self, file=None) -> None:
        # escape: user text such as "[layer, head]" must not be read as rich markup
        err_console.print(
            f"[bold red]error:[/] {escape(self.format_message())}", highlight=False, soft_wrap=True
        )


def print_warning(text: str) -> None:
    """One ``warning:`` line on stderr, each distinct text once per command."""
    if text not in _warnings_shown:
        _warnings_shown.add(text)
        err_console.print(f"[yellow]warning:[/] {escape(text)}", highlight=False, soft_wrap=True)


def _show_warning(message, category, filename, lineno, file=None, line=None) -> None:
    print_warning(str(message))


class DpmtvGroup(click.Group):
    """Turns the library's own errors into one clear line and exit code 2 (usage) or 1
    (refusal, failure), no traceback, Python warnings into ``warning:`` lines (no source line),
    and click's own errors (usage, bad values) into the same ``error:`` prefix, exit codes kept."""

    def make_context(self, *args, **kwargs):
        with _click_errors_prefixed():
            return super().make_context(*args, **kwargs)

    def invoke(self, ctx):
        _warnings_shown.clear()
        with warnings.catch_warnings(), _click_errors_prefixed():
            # dpmtv's own advisories are UserWarnings: shown as lines here (deduplicated by
            # print_warning), whatever filter the caller set (the test suite turns warnings into errors)
            warnings.simplefilter("always", UserWarning)
            warnings.showwarning = _show_warning
            try:
                return super().invoke(ctx)
            except DpmtvError as exc:
                raise DpmtvCommandError(exc) from exc


@contextlib.contextmanager
def _click_errors_prefixed() -> Iterator[None]:
    """click's errors print "Error: ..."; shown here as every other error, "error: ..." (after
    the usage line and the help hint of a usage error), with click's exit code."""
    try:
        yield
    except click.ClickException as exc:
        if not isinstance(exc, DpmtvCommandError):
            exc.show = functools.partial(_show_click_error, exc)  # type: ignore[method-assign]
        raise


def _show_click_error(exc: click.ClickException, file=None) -> None:
    if isinstance(exc, click.UsageError) and exc.ctx is not None:
        context = exc.ctx
        hint = ""
        if context.command.get_help_option(context) is not None:
            hint = f"Try '{context.command_path} {context.help_option_names[0]}' for help.\n"
        click.echo(f"{context.get_usage()}\n{hint}", err=True, color=exc.ctx.color)
    err_console.print(f"[bold red]error:[/] {escape(exc.format_message())}", highlight=False, soft_wrap=True)


DTYPES = ("float32", "bfloat16", "float16")

_LOAD_OPTIONS = (
    click.option(
        "--model-spec",
        "adapter_spec",
        type=click.Path(exists=True, dir_okay=False),
        help="Model spec (JSON): where a checkpoint transformers cannot load natively keeps its "
        "layers, heads and prompt format, e.g. docs/adapters/qwen-vl-chat.json.",
    ),
    click.option(
        "--adapter",
        "deprecated_adapter_spec",
        type=click.Path(exists=True, dir_okay=False),
        hidden=True,
        expose_value=False,
        help="Deprecated: the old name of --model-spec (removed in the next release).",
        callback=lambda ctx, _, value: _deprecated_alias(
            ctx, value, "--adapter", "--model-spec", "adapter_spec"
        ),
    ),
    click.option(
        "--trust-remote-code",
        is_flag=True,
        help="Run the checkpoint's own Python code (transformers' trust_remote_code=True); only "
        "for checkpoints whose source you trust.",
    ),
    click.option(
        "--revision",
        help="Hub revision (branch, tag or commit) of a hub-id --model; the config, weights and "
        "processor all come from that snapshot.",
    ),
    click.option(
        "--attn-implementation",
        help="transformers' attn_implementation (eager, sdpa, flash_attention_2, ...); the "
        "patched heads are the attention output projection's inputs under any of them.",
    ),
    click.option(
        "--adapter-weights",
        type=click.Path(exists=True, file_okay=False),
        help="Folder of a PEFT LoRA adapter (adapter_config.json + adapter_model.safetensors) "
        "merged into --model; the model fingerprint covers it (needs the lora extra).",
    ),
)
_LOAD_OPTION_NAMES = (
    "adapter_spec",
    "trust_remote_code",
    "revision",
    "attn_implementation",
    "adapter_weights",
)


def model_options(function):
    """``--model``, ``--dtype``, ``--device`` and the loading options (``--model-spec``,
    ``--trust-remote-code``, ``--revision``, ``--attn-implementation``, ``--adapter-weights``):
    shared by every command that loads a model. The loading options reach ``load_model`` through
    ``load_options``, so the commands' own signatures do not change."""

    command = function

    @functools.wraps(command)
    def with_load_options(*args, **kwargs):
        from dpmtv.models.loading import load_options

        options = {name: kwargs.pop(name) for name in _LOAD_OPTION_NAMES}
        alias = click.get_current_context().meta.get(_ALIAS_KEY, {}).get("adapter_spec")
        if alias is not None:
            if options["adapter_spec"] is not None:
                raise click.UsageError("give --model-spec only (--adapter is its old name)")
            options["adapter_spec"] = alias
        if kwargs.get("device") == "auto" and not kwargs.get("quiet"):
            announce_auto_device()
        with load_options(**options):
            return command(*args, **kwargs)

    function = with_load_options
    for option in reversed(_LOAD_OPTIONS):
        function = option(function)
    function = click.option(
        "--device",
        default="auto",
        show_default=True,
        envvar="DPMTV_DEVICE",
        help="torch device: auto (the GPU if torch sees one, else the CPU; the choice is printed), cpu, "
        "cuda, cuda:N, or map:auto / map:balanced to spread a large model over the GPUs (transformers' "
        "device_map; needs the device-map extra). Clipping, sums and noise always run in float64 on the CPU.",
    )(function)
    function = click.option(
        "--dtype",
        default="float32",
        show_default=True,
        envvar="DPMTV_DTYPE",
        type=click.Choice(DTYPES),
        help="Weights and forward-pass dtype (bfloat16 halves memory on a GPU); the captured head "
        "outputs are cast to float32 before anything else.",
    )(function)
    return click.option(
        "--model",
        "model_path",
        default="embedded",
        show_default=True,
        envvar="DPMTV_MODEL",
        help="Local checkpoint folder, hub id, or 'embedded' (the packaged model).",
    )(function)


_ALIAS_KEY = "dpmtv.deprecated_aliases"


def _deprecated_alias(ctx: click.Context, value: Any, old: str, new: str, name: str) -> None:
    """An option's old name, kept one release: warns, and hands its value to the new name's
    parameter ``name`` (read back by the command's wrapper)."""
    if value is None:
        return
    print_warning(f"{old} is deprecated and will be removed in the next release; use {new}")
    ctx.meta.setdefault(_ALIAS_KEY, {})[name] = value


def announce_auto_device() -> None:
    """``--device auto``: one stderr line naming the device it chose (torch is needed to tell)."""
    from dpmtv.models.loading import resolve_device

    chosen = resolve_device("auto")
    why = "the GPU torch sees" if chosen != "cpu" else "torch sees no GPU"
    err_console.print(f"device: {chosen} (--device auto: {why})", highlight=False, soft_wrap=True)


def prepare_workers_option(function):
    """``--prepare-workers N``: processes preparing private chunk inputs (BuildSettings.prepare_workers)."""
    return click.option(
        "--prepare-workers",
        type=click.IntRange(min=0),
        help="Processes that decode, process and tokenise chunk inputs ahead of the private forward "
        "passes (default: from the cores and the device; 0: one background thread). Changes no value.",
    )(function)


def private_batch_size_option(function):
    """``--private-batch-size N``: chunks per private forward pass (BuildSettings.private_batch_size)."""
    return click.option(
        "--private-batch-size",
        type=click.IntRange(min=1),
        help="Chunk prompts per private forward pass, each padded to --max-prompt-tokens, dummy rows "
        "in empty slots: fixed public shapes, so no chunk's values depend on another's (default: "
        "min(16, 8192 // budget) with --max-prompt-tokens where the model family allows it, else 1 = "
        "one chunk per pass; recorded in the artifact).",
    )(function)


def build_settings(options: Mapping[str, Any], **fields: Any):
    """The :class:`~dpmtv.pipeline.settings.BuildSettings` of a command: every parsed option named like a
    settings field (``--epsilon``, ``--shots-per-chunk``, ...), ``progress`` from ``--quiet``,
    then ``fields`` (what the command derives itself) over them."""
    import dataclasses

    from dpmtv.pipeline.settings import BuildSettings  # imported when needed: it pulls in numpy

    names = {field.name for field in dataclasses.fields(BuildSettings)}
    values = {name: options[name] for name in names if name in options}
    values["progress"] = not options.get("quiet", False)
    return BuildSettings(**{**values, **fields})


def float_list(ctx, param, value: str | None) -> tuple[float, ...] | None:
    """Click callback: '1.5' or '1,2,3' → a tuple of floats."""
    if value is None:
        return None
    try:
        return tuple(float(part) for part in value.split(","))
    except ValueError:
        raise click.BadParameter(f"'{value}' is not a number or comma-separated numbers") from None


def clip_norms_or_auto(ctx, param, value: str | None) -> str | tuple[float, ...] | None:
    """Click callback: 'auto' (chosen from public data), 'private' (chosen inside the build from
    the private chunks, for an ε share) or '1.5' / '1,2,3' → a tuple of floats."""
    if value is None or value.strip() in ("auto", "private"):
        return None if value is None else value.strip()
    try:
        return tuple(float(part) for part in value.split(","))
    except ValueError:
        raise click.BadParameter(
            f"'{value}' is not 'auto', 'private', a number or comma-separated numbers"
        ) from None


def guarantee_text(privacy) -> str:
    """The one line that states what a vector guarantees (rich markup)."""
    from dpmtv.artifact._claim_words import floating_point_caveat, seeded_noise_words

    p = privacy
    if p.private:
        text = f"({p.epsilon:g}, {p.delta:g})-DP per {p.privacy_unit}, {p.neighbouring_relation}"
        caveat = floating_point_caveat(p)
        return text + (f" [bold yellow]({caveat})[/]" if caveat else "")
    if p.noise_std > 0:
        return f"[bold red]NO GUARANTEE (seeded noise): {seeded_noise_words(p)}[/]"
    return "[bold red]NO GUARANTEE (NON-PRIVATE, ε = ∞): no noise was added[/]"


def trusted_key_option(function):
    """``--trusted-key PUB.pem`` (repeatable): accept only artifacts signed by one of the keys."""
    from pathlib import Path

    return click.option(
        "--trusted-key",
        "trusted_keys",
        multiple=True,
        type=click.Path(path_type=Path, dir_okay=False),
        help="PEM public key (repeatable): accept only a vector whose signature (the .sig file next "
        "to it) is by one of these keys and covers its current bytes and its card's.",
    )(function)


def signature_text(vector, path) -> str:
    """Who signed ``vector`` (loaded from ``path``): verified, or in yellow, that it was not."""
    from dpmtv.artifact.signature import signature_words

    words = escape(signature_words(vector.signer, path))
    return words if vector.signer is not None else f"[bold yellow]{words}[/] (pass --trusted-key PUB.pem)"


def print_vector_summary(metadata, *, path, signature: str | None = None) -> None:
    p = metadata.privacy
    table = Table(title=f"task vector {path}" if path else "task vector", show_header=False)
    rows = [
        ("guarantee", guarantee_text(p)),
        ("accounting", accounting_in_words(p)),
        ("model", f"{metadata.model['architecture']} ({metadata.model['name_or_path']})"),
        ("heads", HeadSet.of(metadata.heads).in_words()),
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
            + (
                "" if p.secure_noise or p.noise_std == 0 else f" [bold red]INSECURE seed {p.insecure_seed}[/]"
            ),
        ),
        ("query / centering", f"{metadata.prompt.get('query')} / {metadata.prompt.get('center')}"),
        ("prompt budget", _prompt_budget(metadata.prompt)),
        (
            "library",
            f"dpmtv {metadata.library_version}, format {metadata.format_version}, {metadata.created_at}",
        ),
    ]
    if signature is not None:
        rows.append(("signature", signature))
    for key, value in rows:
        table.add_row(key, value)
    console.print(table)


def accounting_in_words(p) -> str:
    """How the guarantee was accounted, in words: the summary states one ε (the guarantee); this
    says what the accountant's events compare (so nobody reads dp-accounting's relation name as
    the build's) and, when the σ drawn is worth a lower ε, that and why."""
    if not p.private:
        return "none: the seeded noise can be regenerated" if p.noise_std > 0 else "none: no noise was added"
    unit = "one user's records" if p.privacy_unit == "user" else "one record"
    change = "replacing" if p.neighbouring_relation == "replace-one" else "adding or removing"
    words = (
        f"dp-accounting PLD on unit-sensitivity Gaussian events (σ/Δ = {p.noise_multiplier:.4g}); "
        f"Δ already covers {change} {unit}"
    )
    if p.epsilon_spent < p.epsilon * (1 - 1e-3):
        sampler_map = p.noise_std_sampler_map and p.noise_std_sampler_map >= p.noise_std * (1 - 1e-9)
        why = (
            f"the {p.noise_sampler} sampler's privacy map needed more noise"
            if sampler_map
            else "σ was rounded up"
        )
        words += (
            f". For the σ drawn the accountant certifies ε = {p.epsilon_spent:.3g} < {p.epsilon:g}: {why}"
        )
    return words


def _prompt_budget(prompt: dict) -> str:
    """The public prompt-length rule; artifacts from before it was recorded batched private chunks."""
    if prompt.get("max_prompt_tokens") is None:
        return (
            "not recorded (older build: private chunks were batched, so one chunk's length could "
            "move others' values)"
        )
    rule = prompt.get("over_length_rule")
    failed = (
        "a failing chunk contributes zero"
        if prompt.get("failed_chunk_rule")
        else "failed-chunk rule not recorded (older build: a failing chunk aborted it)"
    )
    forward = prompt.get("private_forward", "one chunk per forward pass")
    return f"{prompt['max_prompt_tokens']} tokens, {rule}; {forward}; {failed}"
