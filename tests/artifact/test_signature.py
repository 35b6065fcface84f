"""Signatures with OpenSSF model-signing (issue 23.2): with a trusted key, an unsigned artifact, a
wrong key, or any byte changed in the tensors or the metadata is refused, and the metadata of one
signed build laid over the tensors of another is refused; inspect shows who signed."""

from __future__ import annotations

import pytest
from click.testing import CliRunner
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from dpmtv.artifact.card import card_path
from dpmtv.artifact.signature import sign_task_vector, signature_path, verify_signature
from dpmtv.artifact.vector import load_task_vector
from dpmtv.cli import main
from dpmtv.data import load_records
from dpmtv.errors import ArtifactSignatureError
from dpmtv.heads import parse_head_spec
from dpmtv.pipeline.build import BuildSettings, build_task_vector
from tests.artifact.test_artifact_claims import _edited
from tests.artifact.test_vector import _header_and_body, _write


def _key_pair(folder, name):
    """A P-256 key pair as PEM files, as `openssl ecparam -name prime256v1 -genkey` writes them."""
    key = ec.generate_private_key(ec.SECP256R1())
    private = folder / f"{name}.pem"
    private.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.TraditionalOpenSSL,
            serialization.NoEncryption(),
        )
    )
    public = folder / f"{name}.pub.pem"
    public.write_bytes(
        key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    )
    return private, public


@pytest.fixture(scope="module")
def keys(tmp_path_factory):
    folder = tmp_path_factory.mktemp("keys")
    return {"signer": _key_pair(folder, "signer"), "other": _key_pair(folder, "other")}


@pytest.fixture(scope="module")
def signed(tiny_llava, tmp_path_factory, keys):
    """Two signed builds of one dataset: ε = 1 and ε = 0.1."""
    from tests.conftest import write_records

    folder = tmp_path_factory.mktemp("signed")
    records = load_records(write_records(folder / "data", 12))
    heads = parse_head_spec("heads:0.1,1.2", tiny_llava.adapter.geometry)
    paths = {}
    for epsilon in (1.0, 0.1):
        settings = BuildSettings(
            epsilon=epsilon, delta=1e-5, l2_clip_norm=(1.0,), shots_per_chunk=4, progress=False
        )
        out = folder / f"eps{epsilon:g}.safetensors"
        paths[epsilon] = build_task_vector(tiny_llava, records, heads, settings, out=out).path
        sign_task_vector(paths[epsilon], private_key=keys["signer"][0])
    return paths


def _copy(source, target, *, signature=True):
    """The artifact, its card and (``signature``) its signature, under ``target``'s name."""
    target.write_bytes(source.read_bytes())
    card_path(target).write_bytes(card_path(source).read_bytes())
    if signature:
        signature_path(target).write_bytes(signature_path(source).read_bytes())
    return target


def test_a_signed_artifact_loads_with_its_key_and_says_who_signed(signed, keys):
    vector = load_task_vector(signed[1.0], trusted_keys=[keys["other"][1], keys["signer"][1]])
    assert vector.signer is not None and vector.signer.trusted_key == keys["signer"][1]
    assert verify_signature(signed[1.0], trusted_keys=[keys["signer"][1]]) == vector.signer


def test_unsigned_or_wrong_key_is_refused(signed, keys, tmp_path):
    with pytest.raises(ArtifactSignatureError, match="none of the trusted keys"):
        load_task_vector(signed[1.0], trusted_keys=[keys["other"][1]])
    unsigned = _copy(signed[1.0], tmp_path / "unsigned.safetensors", signature=False)
    assert load_task_vector(unsigned).signer is None  # without a trusted key: the other checks only
    with pytest.raises(ArtifactSignatureError, match="is not signed"):
        load_task_vector(unsigned, trusted_keys=[keys["signer"][1]])


def test_one_changed_tensor_byte_is_refused(signed, keys, tmp_path):
    target = _copy(signed[1.0], tmp_path / "t.safetensors")
    header, body = _header_and_body(target)
    _write(target, header, body[:-1] + bytes([body[-1] ^ 1]))
    with pytest.raises(ArtifactSignatureError, match="does not verify"):
        load_task_vector(target, trusted_keys=[keys["signer"][1]])


def test_an_edited_and_rehashed_metadata_is_refused(signed, keys, tmp_path):
    """created_at is not part of the claim: the consistency checks accept the edit, the signature not."""
    target = _copy(signed[1.0], tmp_path / "m.safetensors")
    _edited(signed[1.0], target, lambda m: m.update(created_at="2020-01-01T00:00:00+00:00"), rehash=True)
    assert load_task_vector(target).metadata.created_at.startswith("2020")
    with pytest.raises(ArtifactSignatureError, match="does not verify"):
        load_task_vector(target, trusted_keys=[keys["signer"][1]])


def test_the_metadata_of_one_signed_build_over_the_tensors_of_another_is_refused(signed, keys, tmp_path):
    header_strict, _ = _header_and_body(signed[0.1])
    header_loose, body_loose = _header_and_body(signed[1.0])
    header_loose["__metadata__"] = header_strict["__metadata__"]  # ε = 0.1's claim over ε = 1's noise
    for source in (signed[0.1], signed[1.0]):
        target = _copy(source, tmp_path / "swapped.safetensors")
        _write(target, header_loose, body_loose)
        with pytest.raises(ArtifactSignatureError, match="does not verify"):
            load_task_vector(target, trusted_keys=[keys["signer"][1]])


def test_inspect_and_answer_take_trusted_keys(signed, keys, tmp_path, tiny_llava_path):
    runner = CliRunner()
    verified = runner.invoke(main, ["inspect", str(signed[1.0]), "--trusted-key", str(keys["signer"][1])])
    assert verified.exit_code == 0, verified.output
    text = " ".join(verified.output.replace("│", " ").split())
    assert "signed by key sha256:" in text and "verified" in text and "not verified" not in text
    unverified = " ".join(runner.invoke(main, ["inspect", str(signed[1.0])]).output.replace("│", " ").split())
    assert "signature not verified (no trusted key was given)" in unverified
    refused = runner.invoke(main, ["inspect", str(signed[1.0]), "--trusted-key", str(keys["other"][1])])
    assert refused.exit_code == 1 and "none of the trusted keys" in refused.output
    assert "Traceback" not in refused.output


def test_sign_command_refuses_an_inconsistent_claim(signed, keys, tmp_path):
    runner = CliRunner()
    target = tmp_path / "forged.safetensors"
    _edited(signed[1.0], target, lambda m: m["privacy"].update(num_chunks=300), rehash=True)
    result = runner.invoke(main, ["sign", str(target), "--key", str(keys["signer"][0])])
    assert result.exit_code == 1 and "privacy.num_chunks" in result.output
    assert not signature_path(target).exists()
    fresh = _copy(signed[1.0], tmp_path / "fresh.safetensors", signature=False)
    result = runner.invoke(main, ["sign", str(fresh), "--key", str(keys["other"][0])])
    assert result.exit_code == 0, result.output
    assert load_task_vector(fresh, trusted_keys=[keys["other"][1]]).signer is not None


def test_serve_with_trusted_keys_refuses_an_unsigned_vector(signed, keys, tmp_path, tiny_llava_path):
    from dpmtv.serve import ServeSettings, load_served_model
    from dpmtv.serve._guarantee import model_cards

    settings = ServeSettings(trusted_keys=(keys["signer"][1],))
    served = load_served_model(str(tiny_llava_path), [("v", signed[1.0])], trusted_keys=settings.trusted_keys)
    card = model_cards(served)[0]["dpmtv"]["guarantee"]
    assert card["signed_by_key_sha256"] == served.vectors["v"].vector.signer.key_sha256
    unsigned = _copy(signed[1.0], tmp_path / "unsigned.safetensors", signature=False)
    with pytest.raises(ArtifactSignatureError, match="vector 'u' refused: .*is not signed"):
        load_served_model(str(tiny_llava_path), [("u", unsigned)], trusted_keys=settings.trusted_keys)


def test_signing_and_verifying_need_no_network(signed, keys, tmp_path, monkeypatch):
    import socket

    def no_network(*args, **kwargs):
        raise AssertionError("model-signing tried to open a network connection")

    monkeypatch.setattr(socket.socket, "connect", no_network)
    monkeypatch.setattr(socket, "create_connection", no_network)
    target = _copy(signed[1.0], tmp_path / "offline.safetensors", signature=False)
    sign_task_vector(target, private_key=keys["other"][0])
    assert verify_signature(target, trusted_keys=[keys["other"][1]]).trusted_key == keys["other"][1]


def test_build_sign_key_signs_and_a_bad_key_charges_nothing(keys, tiny_llava_path, records_file, tmp_path):
    import json

    from tests.cli.test_cli import _build_args

    runner = CliRunner()
    ledger = tmp_path / "ledger.sqlite"
    init = ["budget", "init", "clinic", "--epsilon", "5", "--delta", "1e-5", "--ledger", str(ledger)]
    assert runner.invoke(main, init).exit_code == 0
    charged = ["--dataset", "clinic", "--ledger", str(ledger)]
    bad_key = tmp_path / "bad.pem"
    bad_key.write_text("not a key\n")
    out = tmp_path / "v.safetensors"
    refused = runner.invoke(
        main, _build_args(tiny_llava_path, records_file, out, "--sign-key", str(bad_key), *charged)
    )
    assert refused.exit_code == 2 and "bad.pem" in refused.output and not out.exists()
    shown = runner.invoke(main, ["budget", "show", "clinic", "--ledger", str(ledger), "--json"])
    assert json.loads(shown.stdout)["charges"] == [], shown.stdout
    built = runner.invoke(
        main, _build_args(tiny_llava_path, records_file, out, "--sign-key", str(keys["signer"][0]))
    )
    assert built.exit_code == 0, built.output
    assert "signed by key sha256:" in " ".join(built.output.replace("│", " ").split())
    assert load_task_vector(out, trusted_keys=[keys["signer"][1]]).signer is not None
