from __future__ import annotations

from pathlib import Path

import click

from dpmtv.cli._common import console


@click.command(name="sign")
@click.argument("artifact", type=click.Path(path_type=Path))
@click.option(
    "--key",
    "private_key",
    required=True,
    type=click.Path(path_type=Path, dir_okay=False),
    help="PEM EC private key (openssl ecparam -name prime256v1 -genkey -noout -out key.pem).",
)
def command(artifact, private_key):
    """Sign a task vector and its model card: write ARTIFACT.sig (OpenSSF model-signing,
    key-based, no network), one manifest over ARTIFACT and the card beside it.

    The artifact is verified first (hashes and the consistency of its claim), so a key never
    vouches for a claim that contradicts its own numbers. Readers check it with --trusted-key;
    a card edited after signing is refused with it."""
    from dpmtv.artifact.signature import sign_task_vector, signer_key_sha256
    from dpmtv.artifact.vector import load_task_vector

    load_task_vector(artifact)
    signature = sign_task_vector(artifact, private_key=private_key)
    console.print(
        f"signed {artifact}: {signature} (key sha256:{signer_key_sha256(artifact)[:16]}…)", highlight=False
    )
