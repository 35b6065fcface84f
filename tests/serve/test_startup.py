"""Start-up: vectors pass the `dpmtv answer` checks or the server refuses to start, with the reason;
non-loopback binds need a key."""

from __future__ import annotations

import shutil

import pytest
from click.testing import CliRunner

from dpmtv.cli import main
from dpmtv.cli.serve import check_bind
from dpmtv.errors import ArtifactIntegrityError, ModelMismatchError, ParameterError
from dpmtv.serve import load_served_model, model_name, parse_vector_spec


@pytest.fixture
def tampered_vector(served_vectors, tmp_path):
    path = tmp_path / "tampered.safetensors"
    shutil.copy(served_vectors["colour"], path)
    data = bytearray(path.read_bytes())
    data[-1] ^= 0x01  # the last byte belongs to the tensor data, not the header
    path.write_bytes(bytes(data))
    return path


def test_a_tampered_vector_is_refused_with_its_name_and_reason(tiny_llava_path, tampered_vector):
    with pytest.raises(ArtifactIntegrityError, match=r"vector 'bad' refused: .* has been modified"):
        load_served_model(str(tiny_llava_path), [("bad", tampered_vector)])


def test_a_vector_for_another_model_is_refused(served_vectors, tiny_checkpoint):
    other = tiny_checkpoint("llava", seed=1)
    with pytest.raises(ModelMismatchError, match=r"vector 'colour' refused: .*attention_weights_sha256"):
        load_served_model(str(other), [("colour", served_vectors["colour"])])


def test_cli_refuses_a_bad_vector_before_serving(tiny_llava_path, tampered_vector):
    result = CliRunner().invoke(
        main, ["serve", "--model", str(tiny_llava_path), "--vector", f"bad={tampered_vector}", "--port", "1"]
    )
    assert result.exit_code == 1
    assert "vector 'bad' refused" in result.output and "has been modified" in result.output


@pytest.mark.parametrize("host", ["0.0.0.0", "192.168.1.10", "::", "example.org"])
def test_non_loopback_bind_needs_a_key_or_the_insecure_switch(host):
    with pytest.raises(ParameterError, match="--api-key"):
        check_bind(host, api_key=None, insecure_no_auth=False)
    check_bind(host, api_key="k", insecure_no_auth=False)
    check_bind(host, api_key=None, insecure_no_auth=True)


@pytest.mark.parametrize("host", ["127.0.0.1", "127.0.0.2", "::1", "localhost"])
def test_loopback_bind_needs_no_key(host):
    check_bind(host, api_key=None, insecure_no_auth=False)


def test_cli_refuses_a_public_bind_without_a_key_before_loading_anything():
    result = CliRunner().invoke(
        main, ["serve", "--model", "/nonexistent", "--host", "0.0.0.0"], env={"DPMTV_API_KEY": ""}
    )
    assert result.exit_code == 2 and "--insecure-no-auth" in result.output


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("colour", "NAME=path"),
        ("=x.safetensors", "must be 1-64"),
        ("a b=x", "must be 1-64"),
        ("a=", "NAME=path"),
    ],
)
def test_bad_vector_specs(spec, message):
    with pytest.raises(ParameterError, match=message):
        parse_vector_spec(spec)


def test_duplicate_or_model_named_vectors_are_refused(tiny_llava_path, served_vectors):
    path = served_vectors["colour"]
    with pytest.raises(ParameterError, match="given twice"):
        load_served_model(str(tiny_llava_path), [("a", path), ("a", path)])
    with pytest.raises(ParameterError, match="bare model's name"):
        load_served_model(str(tiny_llava_path), [(model_name(str(tiny_llava_path)), path)])


@pytest.mark.parametrize(
    ("model", "name"),
    [("embedded", "embedded"), ("/models/Qwen2-VL-2B/", "Qwen2-VL-2B"), ("org/model", "model")],
)
def test_the_bare_model_is_named_by_the_last_path_component(model, name):
    assert model_name(model) == name


@pytest.mark.slow
def test_the_serve_command_starts_uvicorn_and_serves(tiny_llava_path, served_vectors):
    """`dpmtv serve` end to end in a child process: the key comes from the environment."""
    import os
    import subprocess
    import sys
    import time

    import httpx

    from tests.serve._live import free_port

    port = free_port()
    command = [
        sys.executable,
        "-c",
        "import sys; from dpmtv.cli import main; sys.exit(main())",
        "serve",
        "--model",
        str(tiny_llava_path),
        "--vector",
        f"colour={served_vectors['colour']}",
        "--port",
        str(port),
        "--threads",
        "1",
        "--log-level",
        "warning",
    ]
    env = {**os.environ, "DPMTV_API_KEY": "k3y", "PYTHONPATH": os.pathsep.join(sys.path)}
    server = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 600  # a loaded CI machine imports torch slowly
        while True:
            assert server.poll() is None, server.stdout.read()
            try:
                if httpx.get(f"{url}/healthz", timeout=2).json()["auth_required"]:
                    break
            except httpx.HTTPError:
                assert time.monotonic() < deadline, "dpmtv serve did not come up in 600 s"
                time.sleep(0.2)
        assert httpx.get(f"{url}/v1/models").status_code == 401
        models = httpx.get(f"{url}/v1/models", headers={"Authorization": "Bearer k3y"}).json()
        assert [card["id"] for card in models["data"]] == ["colour", tiny_llava_path.name]
    finally:
        server.terminate()
        server.wait(timeout=30)
        server.stdout.close()  # else a ResourceWarning (an error in the suite) when it is collected
