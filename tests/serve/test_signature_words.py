"""Readers say what they did not verify: without a trusted key, `answer`, `serve`'s start-up lines
and ``/v1/models`` say that the vector is unsigned or its signature not verified (a consistent
forgery passes every other check); `serve --require-signature` refuses to start without a key."""

from __future__ import annotations

import shutil

import pytest
from click.testing import CliRunner

from dpmtv.artifact.card import card_path
from dpmtv.artifact.signature import sign_task_vector
from dpmtv.cli import main
from dpmtv.serve import load_served_model
from dpmtv.serve._guarantee import model_cards
from tests.artifact.test_signature import _key_pair


def _flat(text: str) -> str:
    return " ".join(text.split())


@pytest.fixture
def unsigned_and_signed(served_vectors, tmp_path):
    """The 'colour' vector twice: as built (unsigned) and signed, with its card; and the key pair."""
    paths = {}
    for name in ("unsigned", "signed"):
        paths[name] = shutil.copy(served_vectors["colour"], tmp_path / f"{name}.safetensors")
        shutil.copy(card_path(served_vectors["colour"]), card_path(paths[name]))
    private, public = _key_pair(tmp_path, "signer")
    sign_task_vector(paths["signed"], private_key=private)
    return paths, public


def _serve(monkeypatch, *args):
    """`dpmtv serve` up to its start-up lines; uvicorn is neither configured (its logging would
    keep the runner's stream) nor run."""
    from types import SimpleNamespace

    import uvicorn

    import dpmtv.serve._connections

    monkeypatch.setattr(dpmtv.serve._connections, "uvicorn_config", lambda *args, **kwargs: None)
    monkeypatch.setattr(uvicorn, "Server", lambda config: SimpleNamespace(run=lambda: None))
    return CliRunner().invoke(main, ["serve", "--port", "1", *args])


def test_answer_says_unsigned_or_not_verified(tiny_llava_path, records_file, unsigned_and_signed):
    paths, public = unsigned_and_signed
    image = records_file.parent / "img" / "0.png"
    expected = {
        "unsigned": "unsigned: signature not verified",
        "signed": "signature not verified (no trusted key was given)",
    }
    for name, words in expected.items():
        args = [
            "answer",
            "--model",
            str(tiny_llava_path),
            "--vector",
            str(paths[name]),
            "--image",
            str(image),
            "--question",
            "q",
        ]
        result = CliRunner().invoke(main, [*args, "--max-new-tokens", "1"])
        assert result.exit_code == 0, result.output
        assert words in _flat(result.stderr), result.stderr
    args = [
        "answer",
        "--model",
        str(tiny_llava_path),
        "--vector",
        str(paths["signed"]),
        "--image",
        str(image),
        "--question",
        "q",
    ]
    verified = CliRunner().invoke(main, [*args, "--max-new-tokens", "1", "--trusted-key", str(public)])
    assert verified.exit_code == 0, verified.output
    assert "verified" in verified.stderr and "not verified" not in _flat(verified.stderr)


def test_serve_start_up_lines_say_not_verified(tiny_llava_path, unsigned_and_signed, monkeypatch):
    paths, public = unsigned_and_signed
    vectors = ["--vector", f"u={paths['unsigned']}", "--vector", f"s={paths['signed']}"]
    result = _serve(monkeypatch, "--model", str(tiny_llava_path), *vectors)
    assert result.exit_code == 0, result.output
    lines = {line.split()[0]: line for line in _flat(result.stderr).split("serving vector ")[1:]}
    assert "unsigned: signature not verified" in lines["u"]
    assert "signature not verified (no trusted key was given)" in lines["s"]


def test_v1_models_says_whether_the_signature_was_verified(tiny_llava_path, unsigned_and_signed):
    paths, public = unsigned_and_signed
    unverified = load_served_model(str(tiny_llava_path), [("s", paths["signed"])])
    card = model_cards(unverified)[0]["dpmtv"]
    assert card["guarantee"]["signature_verified"] is False
    assert "signature not verified" in card["privacy_statement"]
    verified = load_served_model(str(tiny_llava_path), [("s", paths["signed"])], trusted_keys=[public])
    card = model_cards(verified)[0]["dpmtv"]
    assert card["guarantee"]["signature_verified"] is True
    assert (
        "not verified" not in card["privacy_statement"]
        and "verified at start-up" in card["privacy_statement"]
    )


def test_require_signature_refuses_to_start_without_a_key_or_with_an_unsigned_vector(
    tiny_llava_path, unsigned_and_signed, monkeypatch
):
    paths, public = unsigned_and_signed
    model = ["--model", str(tiny_llava_path), "--require-signature"]
    no_key = _serve(monkeypatch, *model, "--vector", f"s={paths['signed']}")
    assert no_key.exit_code == 2 and "no trusted key is given" in no_key.output, no_key.output
    unsigned = _serve(monkeypatch, *model, "--vector", f"u={paths['unsigned']}", "--trusted-key", str(public))
    assert (
        unsigned.exit_code == 1
        and "vector 'u' refused" in unsigned.output
        and "is not signed" in unsigned.output
    )
    signed = _serve(monkeypatch, *model, "--vector", f"s={paths['signed']}", "--trusted-key", str(public))
    assert signed.exit_code == 0, signed.output
    assert "verified" in signed.stderr and "not verified" not in _flat(signed.stderr)
    assert "Traceback" not in no_key.output + unsigned.output
