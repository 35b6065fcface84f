from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import click

from dpmtv.cli._common import console, float_list
from dpmtv.cli._config_file import config_options


@click.command(name="demo")
@click.option("--out", type=click.Path(path_type=Path), default=Path("demo-out"), show_default=True)
@click.option(
    "--quick", is_flag=True, help="4 tasks, 1 seed, N = 256, ε = 1 only (about 70 s of CPU; for tests)."
)
@click.option(
    "--full",
    is_flag=True,
    help="Every task of the suite (15 seen, 20 held out) instead of the default's 9, and the shots "
    "curve on 16 test images per task instead of 8 (about three times the default's time).",
)
@click.option("--records-per-task", type=int, help="N private records per task (default 2048).")
@click.option("--shots-per-chunk", type=int, help="Records per chunk s (default 8).")
@click.option("--epsilons", callback=float_list, help="Comma-separated ε values (default 0.5,1,2,4,8).")
@click.option("--seeds", type=int, help="Number of seeds (default 3).")
@click.option(
    "--shared-heads",
    is_flag=True,
    help="One head set for all tasks, chosen on the seen tasks (the generic variant), instead of each "
    "task's own public selection (both ship with the model).",
)
@click.option(
    "--no-shot-curve",
    is_flag=True,
    help="Skip the ICL accuracy-vs-shots curve (1/4/16/64 shots) and its plot.",
)
@click.option(
    "--rule",
    "rules",
    multiple=True,
    help="Run the comparison on a rule you type instead of the suite (repeatable), e.g. "
    "'big and not (red or left)': values, colour=red, not, and, or, xor, ( ). Says whether its "
    "table (or complement) was trained; heads from the public selection on a public sample of it.",
)
@click.option(
    "--workers",
    type=click.IntRange(min=0),
    help="Processes for the (task, seed) runs (default: one per core, at most 8; 0 or 1: this "
    "process). The rows are the same for any number.",
)
@click.option(
    "--json-out",
    type=click.Path(path_type=Path),
    help="Also write per rule (or task): rule, trained, zero_shot, icl, mtv, dp_mtv, deciding, ceiling.",
)
@config_options
def command(
    out,
    quick,
    full,
    records_per_task,
    shots_per_chunk,
    epsilons,
    seeds,
    shared_heads,
    no_shot_curve,
    rules,
    workers,
    json_out,
):
    """The paper's comparison on the packaged embedded model, a preset of `dpmtv eval` (each
    task and seed is the embedded:TASK benchmark): zero-shot, 16-shot ICL, MTV and
    DP-MTV at ε ∈ {0.5, 1, 2, 4, 8} over 3 seeds, on 9 tasks (--full: all 35), reported
    separately for the tasks seen in training and the held-out tasks the model learns from the
    demonstrations alone, with the accuracy on the queries only the demonstrations can settle;
    writes report.md, privacy_utility.png, deciding_cells.png, accuracy_vs_shots.png,
    results.json, summary.json and an ε = 1 artifact to --out, and says where each went."""
    from dpmtv.demo import default_config, run_demo
    from dpmtv.demo.report_tasks import write_json_out
    from dpmtv.embedded.generator import rule_task

    for text in rules:  # a bad rule fails here, in one line, before the model loads
        rule_task(text)
    if quick and full:
        raise click.UsageError("--quick and --full are two sizes of the demo: give one of them")
    config = default_config(quick=quick, full=full)
    overrides = {
        "records_per_task": records_per_task,
        "shots_per_chunk": shots_per_chunk,
        "epsilons": epsilons,
        "seeds": tuple(range(seeds)) if seeds else None,
        "shared_heads": shared_heads or None,
        "shot_curve": () if no_shot_curve else None,
        "tasks": () if rules else None,
        "rules": tuple(rules) or None,
    }
    config = replace(config, **{key: value for key, value in overrides.items() if value is not None})
    summary = run_demo(out, quick=quick, console=console, config=config, workers=workers)
    if json_out is not None:
        names = config.rules or config.tasks
        write_json_out(json_out, summary["per_task"], names)
        console.print(f"wrote {json_out}")
