"""``--ray ADDRESS`` before any work: a head that does not answer is one line after a bounded
wait, and a non-loopback head needs Ray's TLS or an explicit ``--ray-insecure-network`` (private
records and un-noised partial sums cross the network). No Ray cluster is started here."""

from __future__ import annotations

import socket

import pytest
from click.testing import CliRunner

from dpmtv.cli import main
from dpmtv.distributed.network import check_ray_network, is_loopback_address, wait_for_head
from dpmtv.errors import DistributedError, ParameterError
from tests.conftest import write_records

pytest.importorskip("ray")

UNREACHABLE = "203.0.113.7:6379"  # TEST-NET-3 (RFC 5737): never routed


def _build(tmp_path, *ray_args):
    data = write_records(tmp_path / "data", 4, seed=1)
    args = ["build", "--model", str(tmp_path / "no-model"), "--data", str(data), "--heads", "layers:0-1",
            "--epsilon", "1", "--out", str(tmp_path / "v.safetensors"), "--quiet", *ray_args]  # fmt: skip
    return CliRunner().invoke(main, args)


def _one_error_line(result, exit_code: int = 1) -> str:
    """The one error line; exit 1 for a refusal at run time, 2 for a refused option (docs/cli.md)."""
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert result.exit_code == exit_code, result.output
    assert len(lines) == 1 and lines[0].startswith("error:"), result.output
    return lines[0]


@pytest.mark.parametrize(
    "address", ["127.0.0.1:6379", "localhost:6379", "[::1]:6379", "ray://127.0.0.1:10001", "127.5.0.1:1"]
)
def test_loopback_addresses(address):
    assert is_loopback_address(address)


@pytest.mark.parametrize("address", ["10.0.0.4:6379", "head-node:6379", "ray://203.0.113.7:10001", "::1"])
def test_non_loopback_addresses(address):
    assert not is_loopback_address(address)


def test_no_cluster_at_the_address_is_one_line_after_the_connect_timeout(tmp_path):
    """On the old code Ray retried for over 240 s (and --ray-connect-timeout did not exist)."""
    line = _one_error_line(_build(tmp_path, "--ray", "127.0.0.1:1", "--ray-connect-timeout", "2"))
    assert "127.0.0.1:1" in line and "--ray-connect-timeout" in line and "nothing was charged" in line


@pytest.mark.parametrize("tls", [None, "0"])
def test_a_non_loopback_head_without_tls_is_refused_before_any_work(tmp_path, monkeypatch, tls):
    if tls is None:
        monkeypatch.delenv("RAY_USE_TLS", raising=False)
    else:
        monkeypatch.setenv("RAY_USE_TLS", tls)
    line = _one_error_line(_build(tmp_path, "--ray", UNREACHABLE), exit_code=2)  # a refused option
    assert UNREACHABLE in line and "RAY_USE_TLS=1" in line and "--ray-insecure-network" in line
    assert not (tmp_path / "v.safetensors").exists()


def test_token_auth_alone_is_not_enough_it_does_not_encrypt(monkeypatch):
    monkeypatch.delenv("RAY_USE_TLS", raising=False)
    monkeypatch.setenv("RAY_AUTH_MODE", "token")
    with pytest.raises(ParameterError, match="does not encrypt"):
        check_ray_network(UNREACHABLE, insecure_network=False)


def test_auto_with_a_remote_ray_address_is_checked_too(monkeypatch):
    monkeypatch.delenv("RAY_USE_TLS", raising=False)
    monkeypatch.setenv("RAY_ADDRESS", UNREACHABLE)
    with pytest.raises(ParameterError, match="RAY_ADDRESS"):
        check_ray_network("auto", insecure_network=False)
    for local in ("127.0.0.1:6379", "auto", "local", ""):
        monkeypatch.setenv("RAY_ADDRESS", local)
        check_ray_network("auto", insecure_network=False)


@pytest.mark.parametrize("opt_in", ["tls", "flag"])
def test_tls_or_the_explicit_flag_lets_a_remote_head_be_tried(monkeypatch, opt_in):
    monkeypatch.delenv("RAY_USE_TLS", raising=False)
    if opt_in == "tls":
        monkeypatch.setenv("RAY_USE_TLS", "1")
    check_ray_network(UNREACHABLE, insecure_network=opt_in == "flag")


def test_tls_without_its_certificates_is_one_line(tmp_path, monkeypatch):
    monkeypatch.setenv("RAY_USE_TLS", "1")
    for name in ("RAY_TLS_SERVER_CERT", "RAY_TLS_SERVER_KEY", "RAY_TLS_CA_CERT"):
        monkeypatch.delenv(name, raising=False)
    line = _one_error_line(_build(tmp_path, "--ray", UNREACHABLE))
    assert "RAY_TLS_CA_CERT" in line and "nothing was charged" in line


def test_a_server_that_accepts_the_connection_but_is_not_a_ray_head_times_out():
    """A bare TCP connect is not an answer (a proxy or another service may accept it)."""
    with socket.create_server(("127.0.0.1", 0)) as silent:  # accepts (backlog), never replies
        address = f"127.0.0.1:{silent.getsockname()[1]}"
        with pytest.raises(DistributedError, match=f"no Ray cluster answered at {address} within 1 s"):
            wait_for_head(address, connect_timeout_s=1)
