from __future__ import annotations

import json

import click

from dpmtv.cli._common import console, float_list
from dpmtv.errors import ParameterError
from dpmtv.pipeline.settings import DEFAULT_L2_CLIP_NORM, DEFAULT_SHOTS_PER_CHUNK


@click.command(name="plan")
@click.option(
    "--model",
    "model_path",
    default="embedded",
    show_default=True,
    help="Checkpoint folder or 'embedded' (only its config is read).",
)
@click.option(
    "--heads",
    "head_spec",
    required=True,
    help="'all', 'layers:A-B', 'heads:L.H,...' or a JSON file of [layer, head] pairs.",
)
@click.option("--num-records", type=click.IntRange(min=1), help="N (replace-one: m = floor(N/s)).")
@click.option("--num-chunks", type=click.IntRange(min=1), help="Public m (add-remove-one, user level).")
@click.option(
    "--shots-per-chunk",
    type=click.IntRange(min=1),
    default=DEFAULT_SHOTS_PER_CHUNK,
    show_default=True,
    help="Records per chunk s.",
)
@click.option("--epsilon", type=float, required=True, help="Privacy budget ε (> 0).")
@click.option("--delta", type=float, default=1e-5, show_default=True, help="δ in (0, 1).")
@click.option(
    "--l2-clip-norm",
    callback=float_list,
    default=f"{DEFAULT_L2_CLIP_NORM:g}",
    show_default=True,
    help="C: one value or one per layer (comma-separated).",
)
@click.option(
    "--neighbouring-relation",
    type=click.Choice(["replace-one", "add-remove-one"]),
    default="replace-one",
    show_default=True,
    help="As for `dpmtv build` (user level: add-remove-one with --num-chunks).",
)
@click.option("--noise-sampler", default="opendp", show_default=True, help="As for `dpmtv build`.")
@click.option(
    "--target-ratio", type=float, default=1.0, show_default=True, help="Wanted signal/noise per layer."
)
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def command(
    model_path,
    head_spec,
    num_records,
    num_chunks,
    shots_per_chunk,
    epsilon,
    delta,
    l2_clip_norm,
    neighbouring_relation,
    noise_sampler,
    target_ratio,
    as_json,
):
    """Preview a build from public settings alone: Δ, σ, the expected noise norm against the
    signal bound C per layer, and the smallest N (or m) reaching --target-ratio. Touches no data
    and no budget (docs/design.md §2)."""
    from dpmtv.heads import parse_head_spec
    from dpmtv.models.loading import read_head_geometry
    from dpmtv.pipeline.preview import preview_release, smallest_num_chunks

    geometry = read_head_geometry(model_path)
    heads = parse_head_spec(head_spec, geometry)
    settings = dict(
        geometry=geometry,
        heads=heads,
        l2_clip_norm=l2_clip_norm,
        epsilon=epsilon,
        delta=delta,
        relation=neighbouring_relation,
        noise_sampler=noise_sampler,
        num_chunks=_num_chunks(neighbouring_relation, num_records, num_chunks, shots_per_chunk),
    )
    preview = preview_release(**settings)
    needed = smallest_num_chunks(target_ratio, **settings)
    report = _report(preview, needed, neighbouring_relation, shots_per_chunk, target_ratio)
    if as_json:
        click.echo(json.dumps(report, indent=2))
    else:
        _print(report)


def _num_chunks(relation, num_records, num_chunks, shots_per_chunk) -> int:
    if relation == "replace-one":
        if num_records is None:
            raise ParameterError("replace-one needs --num-records N (m = floor(N/s))")
        if num_records < shots_per_chunk:
            raise ParameterError(f"--num-records {num_records} is below --shots-per-chunk {shots_per_chunk}")
        return num_records // shots_per_chunk
    if num_chunks is None:
        raise ParameterError("add-remove-one needs the public --num-chunks m")
    return num_chunks


def _report(preview, needed, relation, shots_per_chunk, target_ratio) -> dict:
    plan = preview.plan
    smallest = {"num_chunks": needed.num_chunks, "target_ratio": target_ratio}
    if relation == "replace-one":
        smallest["num_records"] = needed.num_chunks * shots_per_chunk
    return {
        "num_chunks": preview.num_chunks,
        "l2_sensitivity": plan.l2_sensitivity,
        "noise_std": plan.noise_std,
        "noise_std_analytic": plan.noise_std_analytic,
        "noise_std_sampler_map": plan.noise_std_sampler_map,
        "layers": [
            {
                "layer": e.layer,
                "coordinates": e.num_coordinates,
                "l2_clip_norm": e.l2_clip_norm,
                "noise_rms_norm": e.noise_rms_norm,
                "ratio": e.ratio,
            }
            for e in preview.layers
        ],
        "smallest": smallest,
    }


def _print(report: dict) -> None:
    from rich.table import Table

    console.print(
        f"m = {report['num_chunks']} chunks, Δ = {report['l2_sensitivity']:.6g}, "
        f"σ = {report['noise_std']:.6g} (analytic Gaussian {report['noise_std_analytic']:.6g})"
    )
    table = Table("layer", "coordinates k·d", "signal bound C", "expected noise norm σ√(k·d)", "ratio")
    for row in report["layers"]:
        table.add_row(
            str(row["layer"]),
            str(row["coordinates"]),
            f"{row['l2_clip_norm']:.4g}",
            f"{row['noise_rms_norm']:.4g}",
            f"{row['ratio']:.3g}",
        )
    console.print(table)
    smallest = report["smallest"]
    what = f"N = {smallest['num_records']} records" if "num_records" in smallest else ""
    console.print(
        f"smallest for signal/noise ≥ {smallest['target_ratio']:g} in every layer: "
        f"m = {smallest['num_chunks']} chunks" + (f" ({what} at this s)" if what else "")
    )
