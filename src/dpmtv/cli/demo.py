from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import click

from dpmtv.cli._common import console, float_list


@click.command(name="demo")
@click.option("--out", type=click.Path(path_type=Path), default=Path("demo-out"), show_default=True)
@click.option("--quick", is_flag=True, help="4 tasks, 1 seed, N = 256, ε = 1 only (about 20 s; for tests).")
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
def command(out, quick, records_per_task, shots_per_chunk, epsilons, seeds, shared_heads, no_shot_curve):
    """The paper's comparison on the packaged embedded model: zero-shot, 16-shot ICL, MTV and
    DP-MTV at ε ∈ {0.5, 1, 2, 4, 8} over 3 seeds, reported separately for the tasks seen in
    training and the held-out tasks the model learns from the demonstrations alone; writes
    results.json, summary.json, report.md, privacy_utility.png, accuracy_vs_shots.png and an
    ε = 1 artifact to --out."""
    from dpmtv.demo import default_config, run_demo

    config = default_config(quick=quick)
    overrides = {
        "records_per_task": records_per_task,
        "shots_per_chunk": shots_per_chunk,
        "epsilons": epsilons,
        "seeds": tuple(range(seeds)) if seeds else None,
        "shared_heads": shared_heads or None,
        "shot_curve": () if no_shot_curve else None,
    }
    config = replace(config, **{key: value for key, value in overrides.items() if value is not None})
    run_demo(out, quick=quick, console=console, config=config)
