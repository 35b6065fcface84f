"""`dpmtv serve --ray`'s refusals, before Ray or the model starts (the replicas themselves:
test_ray_replicas.py)."""

from __future__ import annotations

import shutil

import pytest
from click.testing import CliRunner

from dpmtv.cli import main

pytest.importorskip("ray.serve")


@pytest.mark.parametrize(
    "options", [["--replicas", "3"], ["--cpus-per-replica", "0.5"], ["--ray-insecure-network"]]
)
def test_ray_options_without_ray_are_refused_not_ignored(options):
    result = CliRunner().invoke(main, ["serve", "--model", "/nonexistent", *options])
    assert result.exit_code == 2 and f"{options[0]} needs --ray" in result.output


def test_a_public_bind_without_a_key_is_refused_with_ray_too():
    result = CliRunner().invoke(
        main,
        ["serve", "--model", "/nonexistent", "--ray", "local", "--host", "0.0.0.0"],
        env={"DPMTV_API_KEY": ""},
    )
    assert result.exit_code == 2 and "--insecure-no-auth" in result.output


def test_a_head_on_another_machine_needs_tls_or_the_insecure_switch(monkeypatch):
    monkeypatch.delenv("RAY_USE_TLS", raising=False)
    result = CliRunner().invoke(
        main, ["serve", "--model", "/nonexistent", "--ray", "192.0.2.1:6379", "--api-key", "k"]
    )
    assert result.exit_code == 2
    assert "the queries, their answers and the API key" in result.output
    assert "--ray-insecure-network" in result.output


def test_a_bad_vector_is_refused_before_ray_starts(tiny_llava_path, served_vectors, tmp_path):
    import ray

    bad = tmp_path / "bad.safetensors"
    shutil.copy(served_vectors["colour"], bad)
    data = bytearray(bad.read_bytes())
    data[-1] ^= 0x01
    bad.write_bytes(bytes(data))
    was_running = ray.is_initialized()
    result = CliRunner().invoke(
        main, ["serve", "--model", str(tiny_llava_path), "--vector", f"bad={bad}", "--ray", "local"]
    )
    assert result.exit_code == 1
    assert "vector 'bad' refused" in result.output and "has been modified" in result.output
    assert ray.is_initialized() == was_running


def test_local_is_a_new_cluster_on_this_machine(monkeypatch):
    from dpmtv.distributed.network import check_ray_network, head_address

    monkeypatch.setenv("RAY_ADDRESS", "192.0.2.1:6379")  # ignored: 'local' never joins a head
    monkeypatch.delenv("RAY_USE_TLS", raising=False)
    assert head_address("local") is None
    check_ray_network("local", insecure_network=False)


def test_each_replica_gets_the_commands_model_options_and_absolute_paths(tmp_path, monkeypatch):
    from dpmtv.cli._serve_ray import replica_spec
    from dpmtv.models.loading import load_options
    from dpmtv.serve import ServeSettings

    monkeypatch.chdir(tmp_path)
    for name in ("model", "v.safetensors", "key.pem", "lora"):
        (tmp_path / name).touch()
    settings = ServeSettings(trusted_keys=(tmp_path.joinpath("key.pem").relative_to(tmp_path),))
    with load_options(revision="abc123", adapter_weights="lora", adapter_spec="qwen-vl-chat"):
        spec = replica_spec("model", [("v", "v.safetensors")], settings, threads=1)
    assert spec.model == str(tmp_path / "model")
    assert spec.vectors == (("v", tmp_path / "v.safetensors"),)
    assert spec.settings.trusted_keys == (tmp_path / "key.pem",)
    assert (spec.load.revision, spec.load.adapter_weights) == ("abc123", tmp_path / "lora")
    assert spec.load.adapter_spec == "qwen-vl-chat"  # a named spec, not a path here
    assert spec.threads == 1


def test_the_log_level_reaches_serve_as_uvicorns_does(tiny_llava_path, served_vectors, monkeypatch):
    """--log-level warning: Serve logs warnings and no line per request (its access log), as a
    single process under uvicorn; info keeps both."""
    import dpmtv.serve.ray_replicas as ray_replicas

    seen = {}
    monkeypatch.setattr(ray_replicas, "serve_forever", lambda spec, **kwargs: seen.update(kwargs))
    vector = f"colour={served_vectors['colour']}"
    for level in ("warning", "info"):
        result = CliRunner().invoke(
            main,
            [
                "serve",
                "--model",
                str(tiny_llava_path),
                "--vector",
                vector,
                "--ray",
                "local",
                "--log-level",
                level,
            ],
        )
        assert result.exit_code == 0, result.output
        assert seen["log_level"] == level
    assert ray_replicas.serve_logging_config("warning") == {
        "log_level": "WARNING",
        "enable_access_log": False,
    }
    assert ray_replicas.serve_logging_config("info") == {"log_level": "INFO", "enable_access_log": True}
