from __future__ import annotations

from pathlib import Path

import click

from dpmtv.cli._common import console


@click.command(name="demo")
@click.option("--out", type=click.Path(path_type=Path), default=Path("demo-out"), show_default=True)
@click.option("--quick", is_flag=True, help="Smaller run (for tests).")
def command(out, quick):
    """The paper's comparison on the packaged embedded model: zero-shot, 16-shot ICL, MTV and
    DP-MTV at ε ∈ {0.5, 1, 2, 4, 8} over its 16 tasks and 3 seeds; writes results.json,
    report.md, privacy_utility.png and an ε = 1 artifact to --out."""
    from dpmtv.demo import run_demo

    run_demo(out, quick=quick, console=console)
