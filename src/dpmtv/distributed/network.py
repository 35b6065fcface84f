"""What a distributed run checks about the Ray head before any work: that the network it would
use is protected, and that the head answers within a bounded time.

Workers receive chunk contents (private records) and return un-noised partial sums; both cross
Ray's RPC, which is plain gRPC unless ``RAY_USE_TLS`` is on, and Ray's token authentication (the
``RAY_AUTH_MODE=token`` setting) authenticates callers but does not encrypt. On one machine
(a loopback head, or ``auto`` without a remote ``RAY_ADDRESS``) nothing leaves it; to any other
head the run needs Ray's TLS (``RAY_USE_TLS=1`` with ``RAY_TLS_SERVER_CERT``,
``RAY_TLS_SERVER_KEY`` and ``RAY_TLS_CA_CERT``: mutual TLS, which also authenticates the nodes)
or an explicit opt-out, ``--ray-insecure-network`` (docs/design.md §13).
"""

from __future__ import annotations

import ipaddress
import os
import socket
import ssl
import time

from dpmtv.errors import DistributedError, ParameterError

__all__ = ["check_ray_network", "head_address", "is_loopback_address", "wait_for_head"]

_TLS_ON = ("1", "true")
_RETRY_S = 0.25  # between refused connections while a head may still be starting


def _host_port(address: str) -> tuple[str, int] | None:
    """``host:port``, ``[v6]:port`` or ``ray://host:port`` → (host, port); None otherwise."""
    rest = address.removeprefix("ray://")
    if rest.startswith("["):
        host, _, port = rest[1:].partition("]:")
    else:
        host, _, port = rest.rpartition(":")
    if not host or ":" in host and not rest.startswith("[") or not port.isdigit():
        return None
    return host, int(port)


def is_loopback_address(address: str) -> bool:
    """True for a head on this machine's loopback (``localhost``, 127.0.0.0/8, ``::1``). Other
    names are not resolved: a name is treated as another machine."""
    parsed = _host_port(address)
    if parsed is None:
        return False
    host = parsed[0]
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def head_address(address: str) -> str | None:
    """The head a run joins: ``address``, or for ``auto`` the ``RAY_ADDRESS`` variable (None:
    this machine's own cluster, or a new local one, which ``local`` always starts)."""
    if address == "local":
        return None
    if address != "auto":
        return address
    variable = os.environ.get("RAY_ADDRESS", "")
    return None if variable in ("", "auto", "local") else variable


def check_ray_network(
    address: str,
    *,
    insecure_network: bool,
    crossing: str = "private records and un-noised partial sums",
) -> None:
    """Refuse a head off this machine unless Ray's TLS is on or ``insecure_network`` is given.
    ``crossing`` says what would travel unencrypted (the build's records; the server's queries).

    Raises:
        ParameterError: names the address, what would cross the network, and both ways on.
    """
    head = head_address(address)
    if head is None or is_loopback_address(head) or insecure_network:
        return
    if os.environ.get("RAY_USE_TLS", "0").lower() in _TLS_ON:
        return
    named = f"--ray {address}" + (f" (RAY_ADDRESS={head})" if head != address else "")
    token = os.environ.get("RAY_AUTH_MODE", "").lower() == "token"
    why = "; Ray's token auth (RAY_AUTH_MODE=token) is on but does not encrypt" if token else ""
    raise ParameterError(
        f"{named} is not on this machine, and {crossing} would "
        f"cross the network unencrypted (RAY_USE_TLS is off{why}): set RAY_USE_TLS=1 with "
        "RAY_TLS_SERVER_CERT, RAY_TLS_SERVER_KEY and RAY_TLS_CA_CERT on every node, or accept a "
        "trusted network explicitly with --ray-insecure-network"
    )


def wait_for_head(address: str, *, connect_timeout_s: float) -> None:
    """Wait at most ``connect_timeout_s`` seconds for the head's gRPC server to answer (Ray
    itself retries for minutes). Answering means an HTTP/2 SETTINGS frame in reply to the client
    preface (over TLS with ``RAY_USE_TLS``): a bare TCP connect is not enough, since a proxy or
    another service may accept it. Nothing for ``auto`` without ``RAY_ADDRESS``.

    Raises:
        DistributedError: no answer in time (names the address and the timeout option), or
            TLS on without readable certificates.
    """
    head = head_address(address)
    parsed = None if head is None else _host_port(head)
    if parsed is None:
        return  # Ray reports an address it cannot parse itself
    tls = _tls_context() if os.environ.get("RAY_USE_TLS", "0").lower() in _TLS_ON else None
    deadline = time.monotonic() + connect_timeout_s
    while True:
        try:
            if _answers_http2(parsed, tls, timeout_s=max(deadline - time.monotonic(), 0.01)):
                return
        except OSError:
            pass  # refused or reset: the head may still be starting
        if deadline - time.monotonic() <= _RETRY_S:
            raise DistributedError(
                f"no Ray cluster answered at {head} within {connect_timeout_s:g} s; start it with "
                "'ray start --head', check the address, or wait longer with --ray-connect-timeout"
            )
        time.sleep(_RETRY_S)


# The HTTP/2 client connection preface and an empty SETTINGS frame (RFC 9113 §3.4, §6.5): a
# gRPC server answers with its own SETTINGS frame (frame type 4, the 4th byte of its header).
_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + bytes([0, 0, 0, 4, 0, 0, 0, 0, 0])
_SETTINGS = 4


def _answers_http2(host_port: tuple[str, int], tls: ssl.SSLContext | None, *, timeout_s: float) -> bool:
    with socket.create_connection(host_port, timeout=timeout_s) as raw:
        conn = raw if tls is None else tls.wrap_socket(raw, server_hostname=host_port[0])
        conn.sendall(_PREFACE)
        header = b""
        while len(header) < 9:
            data = conn.recv(9 - len(header))
            if not data:
                return False
            header += data
        return header[3] == _SETTINGS


def _tls_context() -> ssl.SSLContext:
    """Ray's TLS settings as a client context: its CA, and its node certificate (mutual TLS)."""
    paths = {
        name: os.environ.get(name)
        for name in ("RAY_TLS_SERVER_CERT", "RAY_TLS_SERVER_KEY", "RAY_TLS_CA_CERT")
    }
    missing = [name for name, path in paths.items() if not path]
    if missing:
        raise DistributedError(f"RAY_USE_TLS is on but {', '.join(missing)} is not set")
    try:
        context = ssl.create_default_context(cafile=paths["RAY_TLS_CA_CERT"])
        context.load_cert_chain(paths["RAY_TLS_SERVER_CERT"], paths["RAY_TLS_SERVER_KEY"])
    except (OSError, ssl.SSLError) as exc:
        raise DistributedError(f"RAY_USE_TLS is on but its certificates cannot be read: {exc}") from None
    context.check_hostname = False  # Ray's node certificates name nodes, not the address dialled
    context.set_alpn_protocols(["h2"])
    return context
