from __future__ import annotations

from pathlib import Path

import click

from dpmtv.cli._common import print_vector_summary, print_warning, signature_text, trusted_key_option
from dpmtv.models.registry import UNTESTED_WARNING, is_contract_tested


@click.command(name="inspect")
@click.argument("artifact", type=click.Path(path_type=Path))
@click.option("--json", "as_json", is_flag=True, help="Print the full metadata as JSON.")
@click.option(
    "--card",
    "as_card",
    is_flag=True,
    help="Print the vector's model card (what task.README.md beside it holds), rendered from the "
    "verified metadata.",
)
@trusted_key_option
def command(artifact, as_json, as_card, trusted_keys):
    """Show a task vector's guarantee, model and parameters, and who signed it (verifies its hash,
    its claim and, with --trusted-key, its signature)."""
    from dpmtv.artifact.vector import load_task_vector

    vector = load_task_vector(artifact, trusted_keys=trusted_keys)
    model_type = str(vector.metadata.model.get("model_type"))
    if not is_contract_tested(model_type):
        print_warning(UNTESTED_WARNING.format(model_type=model_type))
    if as_card:
        from dpmtv.artifact.card import render_card

        click.echo(render_card(vector.metadata, artifact_name=Path(artifact).name), nl=False)
        return
    if as_json:
        click.echo(vector.metadata.model_dump_json(indent=2))
        return
    print_vector_summary(vector.metadata, path=artifact, signature=signature_text(vector, artifact))
