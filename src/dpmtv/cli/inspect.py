from __future__ import annotations

from pathlib import Path

import click

from dpmtv.cli._common import print_vector_summary, signature_text, trusted_key_option


@click.command(name="inspect")
@click.argument("artifact", type=click.Path(path_type=Path))
@click.option("--json", "as_json", is_flag=True, help="Print the full metadata as JSON.")
@trusted_key_option
def command(artifact, as_json, trusted_keys):
    """Show a task vector's guarantee, model and parameters, and who signed it (verifies its hash,
    its claim and, with --trusted-key, its signature)."""
    from dpmtv.vector import load_task_vector

    vector = load_task_vector(artifact, trusted_keys=trusted_keys)
    if as_json:
        click.echo(vector.metadata.model_dump_json(indent=2))
        return
    print_vector_summary(vector.metadata, path=artifact, signature=signature_text(vector, artifact))
