"""A signature covers the artifact AND its model card, written with them all-or-nothing; keys that
model-signing cannot sign with and malformed signature files are refused in one line."""

from __future__ import annotations

import errno
import json

import pytest
from click.testing import CliRunner
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa

from dpmtv.artifact.card import card_path
from dpmtv.artifact.signature import check_signing_key, sign_task_vector, signature_path
from dpmtv.artifact.vector import load_task_vector, save_task_vector
from dpmtv.cli import main
from dpmtv.errors import ArtifactSignatureError, ParameterError
from tests.artifact.test_signature import _copy, keys, signed  # noqa: F401  (fixtures)


def _private_pem(key, path):
    path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )
    return path


def test_an_edited_card_is_refused_with_a_trusted_key(signed, keys, tmp_path):  # noqa: F811
    target = _copy(signed[1.0], tmp_path / "t.safetensors")
    card = card_path(target)
    card.write_text(card.read_text().replace("differential privacy", "differential privacy, audited"))
    assert load_task_vector(target).signer is None  # without a key: the artifact's own checks only
    with pytest.raises(ArtifactSignatureError, match=r"t\.README\.md changed since signing"):
        load_task_vector(target, trusted_keys=[keys["signer"][1]])


def test_a_missing_card_is_refused_with_a_trusted_key(signed, keys, tmp_path):  # noqa: F811
    target = _copy(signed[1.0], tmp_path / "t.safetensors")
    card_path(target).unlink()
    with pytest.raises(ArtifactSignatureError, match="card .* is missing"):
        load_task_vector(target, trusted_keys=[keys["signer"][1]])


def test_a_signature_over_the_artifact_alone_asks_to_re_sign(signed, keys, tmp_path):  # noqa: F811
    """dpmtv 0.1.0's signatures listed one file: they are refused with the line that re-signs."""
    import model_signing.signing

    target = _copy(signed[1.0], tmp_path / "old.safetensors", signature=False)
    config = model_signing.signing.Config().use_elliptic_key_signer(private_key=keys["signer"][0])
    config.sign(target, signature_path(target))
    with pytest.raises(ArtifactSignatureError, match="covers the artifact alone .* re-sign it: dpmtv sign"):
        load_task_vector(target, trusted_keys=[keys["signer"][1]])
    sign_task_vector(target, private_key=keys["signer"][0])
    assert load_task_vector(target, trusted_keys=[keys["signer"][1]]).signer is not None


def test_a_renamed_trio_stays_signed_and_a_lone_renamed_card_does_not(signed, keys, tmp_path):  # noqa: F811
    """The manifest is read by role: an artifact renamed with its card and signature verifies; the
    card of the ε = 0.1 build beside the ε = 1 artifact does not."""
    renamed = _copy(signed[1.0], tmp_path / "renamed.safetensors")
    assert load_task_vector(renamed, trusted_keys=[keys["signer"][1]]).signer is not None
    card_path(renamed).write_bytes(card_path(signed[0.1]).read_bytes())
    with pytest.raises(ArtifactSignatureError, match=r"renamed\.README\.md changed since signing"):
        load_task_vector(renamed, trusted_keys=[keys["signer"][1]])


@pytest.mark.parametrize(
    ("make_key", "kind"),
    [
        (lambda: rsa.generate_private_key(public_exponent=65537, key_size=2048), "RSA"),
        (ed25519.Ed25519PrivateKey.generate, "Ed25519"),
        (lambda: ec.generate_private_key(ec.SECP256K1()), "secp256k1"),
    ],
)
def test_keys_model_signing_cannot_use_are_refused_in_one_line(signed, tmp_path, make_key, kind):  # noqa: F811
    key = _private_pem(make_key(), tmp_path / "key.pem")
    with pytest.raises(ParameterError, match=kind):
        check_signing_key(key)
    target = _copy(signed[1.0], tmp_path / "t.safetensors", signature=False)
    result = CliRunner().invoke(main, ["sign", str(target), "--key", str(key)])
    assert result.exit_code == 2 and kind in result.output, result.output
    assert "Traceback" not in result.output and not signature_path(target).exists()


def test_a_signature_file_with_no_signatures_is_refused_in_one_line(signed, keys, tmp_path):  # noqa: F811
    target = _copy(signed[1.0], tmp_path / "t.safetensors")
    bundle = json.loads(signature_path(target).read_text())
    bundle["dsseEnvelope"]["signatures"] = []
    signature_path(target).write_text(json.dumps(bundle))
    with pytest.raises(ArtifactSignatureError, match="holds 0 signatures"):
        load_task_vector(target, trusted_keys=[keys["signer"][1]])
    result = CliRunner().invoke(main, ["inspect", str(target), "--trusted-key", str(keys["signer"][1])])
    assert result.exit_code == 1 and "holds 0 signatures" in result.output
    assert "Traceback" not in result.output


def test_artifact_card_and_signature_land_together_or_not_at_all(signed, keys, tmp_path, monkeypatch):  # noqa: F811
    """A disk that fills between the artifact and its card leaves none of the three files."""
    import dpmtv.artifact.vector

    vector = load_task_vector(signed[1.0])
    written = save_task_vector(vector, tmp_path / "v.safetensors", sign_key=keys["signer"][0])
    assert load_task_vector(written, trusted_keys=[keys["signer"][1]]).signer is not None

    def full_disk(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(dpmtv.artifact.vector, "render_card", full_disk)
    with pytest.raises(OSError, match="No space left"):
        save_task_vector(vector, tmp_path / "new" / "w.safetensors", sign_key=keys["signer"][0])
    assert list((tmp_path / "new").iterdir()) == []  # no artifact, card, signature or temporary


def test_build_json_with_a_sign_key_writes_the_signature(keys, tiny_llava_path, records_file, tmp_path):  # noqa: F811
    from tests.cli.test_cli import _build_args

    out = tmp_path / "v.safetensors"
    args = _build_args(tiny_llava_path, records_file, out, "--sign-key", str(keys["signer"][0]), "--json")
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    assert summary["signature"] == str(signature_path(out)) and summary["card"] == str(card_path(out))
    assert load_task_vector(out, trusted_keys=[keys["signer"][1]]).signer is not None
