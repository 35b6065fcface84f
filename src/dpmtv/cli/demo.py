from __future__ import annotations

from pathlib import Path

import click

from dpmtv.cli._common import console


@click.command(name="demo")
@click.option("--out", type=click.Path(path_type=Path), default=Path("demo-out"), show_default=True)
@click.option("--quick", is_flag=True, help="Smaller run (for tests).")
def command(out, quick):
    """Run the whole pipeline on the packaged default model (build → inspect → answer)."""
    from dpmtv.demo import run_demo

    run_demo(out, quick=quick, console=console)
