"""``dpmtv`` command line: demo | build | answer | inspect."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import click
from rich.console import Console
from rich.table import Table

from dpmtv.errors import DpmtvError, ParameterError

console = Console(stderr=False)
err_console = Console(stderr=True)


class DpmtvCommandError(click.ClickException):
    exit_code = 2

    def show(self, file=None) -> None:
        err_console.print(f"[bold red]error:[/] {self.format_message()}", highlight=False, soft_wrap=True)


class _Group(click.Group):
    """Turns the library's own errors into one clear line and exit code 2, no traceback."""

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except DpmtvError as exc:
            raise DpmtvCommandError(str(exc)) from exc


@click.group(cls=_Group)
@click.version_option(package_name="dpmtv")
def main() -> None:
    """Differentially private many-shot multimodal in-context learning (DP-MTV)."""


def _float_list(ctx, param, value: str | None) -> tuple[float, ...] | None:
    if value is None:
        return None
    try:
        return tuple(float(part) for part in value.split(","))
    except ValueError:
        raise click.BadParameter(f"'{value}' is not a number or comma-separated numbers") from None


@main.command()
@click.option(
    "--model",
    "model_path",
    default="embedded",
    show_default=True,
    help="Local checkpoint folder, hub id, or 'embedded'.",
)
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
    required=True,
    help="'all', 'layers:A-B', 'heads:L.H,...' or a JSON file of [layer, head] pairs.",
)
@click.option("--epsilon", type=float, help="Privacy budget ε of the build (> 0).")
@click.option("--delta", type=float, default=1e-5, show_default=True, help="δ in (0, 1); keep it below 1/N.")
@click.option(
    "--l2-clip-norm",
    callback=_float_list,
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
    default="replace-one",
    show_default=True,
    help="replace-one: N is public. add-remove-one: needs record ids and --num-chunks.",
)
@click.option("--num-chunks", type=int, help="Public, fixed m (required for add-remove-one).")
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
@click.option("--batch-size", type=int, default=4, show_default=True)
@click.option(
    "--noise-sampler",
    type=click.Choice(["opendp", "csprng-numpy"]),
    default="opendp",
    show_default=True,
    help="opendp: floating-point-safe exact sampler (default).",
)
@click.option(
    "--insecure-seeded-noise",
    "insecure_seed",
    type=int,
    help="INSECURE: seed the noise and partition (experiments only; recorded in the artifact).",
)
@click.option(
    "--non-private",
    is_flag=True,
    help="NON-PRIVATE baseline: no noise, no guarantee (ε = ∞, labelled in the artifact).",
)
@click.option(
    "--dtype", default="float32", show_default=True, type=click.Choice(["float32", "bfloat16", "float16"])
)
@click.option("--device", default="cpu", show_default=True)
@click.option("--quiet", is_flag=True, help="No progress bar.")
def build(
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
):
    """Build a private task vector from private records (SPEC §4)."""
    from dpmtv.build import BuildSettings, build_task_vector
    from dpmtv.data import load_records
    from dpmtv.heads import parse_head_spec
    from dpmtv.models.loading import load_model

    if epsilon is None and not non_private:
        raise ParameterError(
            "--epsilon is required (or --non-private for an explicitly non-private baseline)"
        )
    records = load_records(data_path)
    loaded = load_model(model_path, dtype=dtype, device=device)
    heads = parse_head_spec(head_spec, loaded.adapter.geometry)
    settings = BuildSettings(
        epsilon=math.inf if non_private else epsilon,
        delta=delta,
        l2_clip_norm=l2_clip_norm,
        shots_per_chunk=shots_per_chunk,
        neighbouring_relation=neighbouring_relation,
        num_chunks=num_chunks,
        query=query,
        query_question=query_question,
        center=center,
        batch_size=batch_size,
        noise_sampler=noise_sampler,
        insecure_seed=insecure_seed,
        allow_insecure_seed=insecure_seed is not None,
        non_private=non_private,
        head_selection={"method": "user", "spec": head_spec},
        progress=not quiet,
    )
    result = build_task_vector(loaded, records, heads, settings, out=out)
    for note in result.warnings:
        err_console.print(f"[yellow]warning:[/] {note}")
    _print_summary(result.vector.metadata, path=result.path)


@main.command()
@click.option("--model", "model_path", default="embedded", show_default=True)
@click.option(
    "--vector",
    "vector_path",
    type=click.Path(path_type=Path),
    help="Task vector artifact; omit for plain zero-shot answers.",
)
@click.option(
    "--image", "images", multiple=True, type=click.Path(path_type=Path), help="Query image (repeatable)."
)
@click.option("--question", help="Query question.")
@click.option(
    "--queries",
    type=click.Path(path_type=Path),
    help="JSONL/CSV of queries (image, question; answer optional and ignored).",
)
@click.option("--max-new-tokens", type=int, default=16, show_default=True)
@click.option("--batch-size", type=int, default=8, show_default=True)
@click.option(
    "--prefill-only", is_flag=True, help="Patch only the prompt's last position, not each generated token."
)
@click.option("--json", "as_json", is_flag=True, help="Print JSON lines.")
@click.option(
    "--dtype", default="float32", show_default=True, type=click.Choice(["float32", "bfloat16", "float16"])
)
@click.option("--device", default="cpu", show_default=True)
def answer(
    model_path,
    vector_path,
    images,
    question,
    queries,
    max_new_tokens,
    batch_size,
    prefill_only,
    as_json,
    dtype,
    device,
):
    """Answer zero-shot queries with a task vector applied (no further privacy cost)."""
    from dpmtv.apply import answer_queries
    from dpmtv.models.loading import load_model
    from dpmtv.vector import load_task_vector

    examples, ids = _query_examples(images, question, queries)
    vector = load_task_vector(vector_path) if vector_path else None
    loaded = load_model(model_path, dtype=dtype, device=device)
    mode = "prefill-only" if prefill_only else "every-call"
    answers = answer_queries(
        loaded, examples, vector=vector, max_new_tokens=max_new_tokens, batch_size=batch_size, mode=mode
    )
    for query_id, text in zip(ids, answers, strict=False):
        if as_json:
            click.echo(json.dumps({"id": query_id, "answer": text}))
        else:
            console.print(f"{query_id}\t{text}" if queries else text, highlight=False)


def _query_examples(images, question, queries):
    from dpmtv.data import load_records
    from dpmtv.data.records import Record, validate_records
    from dpmtv.prompts import Example

    if queries and (images or question):
        raise ParameterError("give either --queries FILE or --image/--question, not both")
    if queries:
        records = load_records(queries, require_answer=False)
    elif images and question is not None:
        records = validate_records(
            [Record("query", tuple(Path(p).resolve() for p in images), question, "", where="--image")],
            source="--image",
        )
    else:
        raise ParameterError("give --image and --question, or --queries FILE")
    return [Example(r.load_images(), r.question) for r in records], [r.record_id for r in records]


@main.command()
@click.argument("artifact", type=click.Path(path_type=Path))
@click.option("--json", "as_json", is_flag=True, help="Print the full metadata as JSON.")
def inspect(artifact, as_json):
    """Show a task vector's guarantee, model and parameters (verifies its hash)."""
    from dpmtv.vector import load_task_vector

    vector = load_task_vector(artifact)
    if as_json:
        click.echo(vector.metadata.model_dump_json(indent=2))
        return
    _print_summary(vector.metadata, path=artifact)


def _print_summary(metadata, *, path) -> None:
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


@main.command()
@click.option("--out", type=click.Path(path_type=Path), default=Path("demo-out"), show_default=True)
@click.option("--quick", is_flag=True, help="Smaller run (for tests).")
def demo(out, quick):
    """Run the whole pipeline on the packaged default model (build → inspect → answer)."""
    from dpmtv.demo import run_demo

    run_demo(out, quick=quick, console=console)


if __name__ == "__main__":
    sys.exit(main())
