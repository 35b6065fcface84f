"""`dpmtv serve --ray`: the served vectors as N Ray Serve replicas behind one HTTP endpoint.

Each replica is a Ray actor that loads the model and the vectors itself, with the same checks
as ``dpmtv serve`` (hashes, model fingerprint, signatures by the trusted keys; a replica whose
check fails does not start), and runs today's app (:func:`dpmtv.serve.create_app`): its
batcher, limits, API key and Host/Origin checks. Ray Serve's HTTP proxy holds the port and
sends each request to a replica; a replica that dies is replaced by Serve's controller. Every
response carries the answering replica's id in ``x-dpmtv-replica``.

The proxy is Ray Serve's own uvicorn: the header timeout and the connection cap of
:mod:`dpmtv.serve._connections` do not apply to it (the body timeout and every request limit
do, in the replicas). Queries are post-processing of released vectors: no privacy cost.
"""

from __future__ import annotations

import contextlib
import logging
import re
import signal
import time
from typing import Any

from dpmtv.errors import DistributedError, ParameterError
from dpmtv.serve._copies import REPLICA_HEADER, CopyHeader, ReplicaSpec, load_copy

__all__ = ["APP_NAME", "REPLICA_HEADER", "ReplicaSpec", "deploy_replicas", "serve_forever"]

APP_NAME = "dpmtv"

_READY_TIMEOUT_S = 600.0  # replicas loading a large model on a busy cluster
_ERROR_LINE = re.compile(r"^\s*[\w.]+(Error|Exception): ")


class DpmtvReplica:
    """One replica's code: load and check, then build the app (Serve runs its lifespan, which
    starts and stops the batcher, inside the replica)."""

    def __init__(self, spec: ReplicaSpec) -> None:
        from ray import serve

        self._spec = spec
        self._served = load_copy(spec)
        self.replica_id = serve.get_replica_context().replica_id.unique_id

    def __serve_build_asgi_app__(self) -> Any:
        from dpmtv.serve import create_app

        app = create_app(self._served, self._spec.settings)
        app.add_middleware(CopyHeader, replica=self.replica_id)
        return app


def deploy_replicas(
    spec: ReplicaSpec,
    *,
    replicas: int,
    host: str,
    port: int,
    cpus_per_replica: float = 1.0,
    keep_alive_s: float = 30.0,
    log_level: str = "info",
    app_name: str = APP_NAME,
    ready_timeout_s: float = _READY_TIMEOUT_S,
) -> None:
    """Start Serve's proxy on ``host:port`` (Ray must be initialised) and ``replicas`` replicas
    of the app; return when all are running. ``log_level`` is ``dpmtv serve --log-level``: as
    uvicorn's, Serve's access log (a line per request) is on at ``info`` and below only.

    Raises:
        DistributedError: a replica did not start within ``ready_timeout_s`` (its check failed,
            or Ray could not place it: Serve itself would wait for ever).
    """
    if replicas < 1:
        raise ParameterError(f"--replicas must be at least 1, got {replicas}")
    from ray import serve

    logging_config = serve_logging_config(log_level)
    _start_proxy(host, port, keep_alive_s, logging_config)
    queue = spec.settings.max_queue  # the replica's own batcher queue answers 429 beyond it
    deployment = serve.deployment(
        name="DpmtvReplica",
        num_replicas=replicas,
        max_ongoing_requests=queue,
        max_queued_requests=queue,  # beyond it Serve's proxy answers 503
        ray_actor_options={"num_cpus": cpus_per_replica},
        logging_config=logging_config,
    )(serve.ingress()(DpmtvReplica))
    try:
        # not serve.run: it waits without a bound for the app to run (Ray 2.60), and a replica
        # that no node has room for never runs; _wait_running bounds the wait
        target = serve.RunTarget(deployment.bind(spec), name=app_name, route_prefix=_route(app_name))
        serve.run_many([target], wait_for_applications_running=False)
        _wait_running(app_name, replicas, ready_timeout_s)
    except (RuntimeError, TimeoutError) as exc:
        why = _replica_error(app_name) or _first_line(exc)
        with contextlib.suppress(Exception):  # best effort; the error said is why it did not start
            serve.delete(app_name)  # not left retrying to place its replicas
        raise DistributedError(f"the Ray Serve replicas did not start: {why}") from None


def serve_logging_config(log_level: str) -> dict[str, Any]:
    """Ray Serve's logging for ``dpmtv serve --log-level``: the level, and the access log as
    uvicorn keeps it (on at ``info`` and ``debug``)."""
    return {"log_level": log_level.upper(), "enable_access_log": log_level in ("info", "debug")}


def _start_proxy(host: str, port: int, keep_alive_s: float, logging_config: dict[str, Any]) -> None:
    """Start Serve with its proxy on ``host:port``; refuse a cluster whose Serve already runs
    elsewhere (Serve would keep its own address and only log a warning)."""
    from ray import serve
    from ray.serve.context import _get_global_client  # Serve's public API does not say its address

    serve.start(
        http_options={"host": host, "port": port, "keep_alive_timeout_s": int(keep_alive_s)},
        logging_config=logging_config,
    )
    client = _get_global_client()
    running = None if client is None else client.http_config
    if running is not None and (running.host, running.port) != (host, port):
        raise ParameterError(
            f"Ray Serve already runs on this cluster with its HTTP proxy on {running.host}:"
            f"{running.port}, not --host {host} --port {port}: give those, or use another cluster"
        )


def _replica_error(app_name: str) -> str | None:
    """The error a replica's constructor raised (the last ``...Error: ...`` line of the
    traceback Serve keeps in the deployment's status), or None."""
    from ray import serve

    try:
        message = serve.status().applications[app_name].deployments["DpmtvReplica"].message
    except (KeyError, RuntimeError):
        return None
    errors = [line.strip() for line in message.splitlines() if _ERROR_LINE.match(line)]
    return errors[-1] if errors else None


def _route(app_name: str) -> str:
    """The app's URL prefix: the root for the CLI's app, ``/NAME`` for another (tests)."""
    return "/" if app_name == APP_NAME else f"/{app_name}"


def _wait_running(app_name: str, replicas: int, timeout_s: float) -> None:
    """Wait for every replica to run, or raise what Serve says of the deployment (why a replica
    is not placed, for one)."""
    from ray import serve

    deadline = time.monotonic() + timeout_s
    message = ""
    while time.monotonic() < deadline:
        app = serve.status().applications.get(app_name)  # not listed for a moment after run_many
        if app is not None and app.status == "DEPLOY_FAILED":  # a replica's check failed: Serve gave up
            raise RuntimeError(app.message)
        status = None if app is None else app.deployments.get("DpmtvReplica")
        if status is not None:
            message = status.message
            running = sum(count for state, count in status.replica_states.items() if state == "RUNNING")
            if running >= replicas:
                return
        time.sleep(0.5)
    said = f" (Ray Serve: {' '.join(message.split())})" if message.strip() else ""
    raise TimeoutError(f"fewer than {replicas} replicas running after {timeout_s:g} s{said}")


def serve_forever(
    spec: ReplicaSpec, *, address: str, replicas: int, host: str, port: int, **deploy: Any
) -> None:
    """Join (or start, for ``local`` or ``auto`` without a cluster) Ray, deploy, and serve until
    interrupted; then delete the app (a shared cluster's other Serve apps keep running)."""
    import ray  # the command has checked it is installed
    from ray import serve

    try:
        ray.init(address=None if address == "auto" else address, logging_level=logging.WARNING)
    except (ConnectionError, RuntimeError, ValueError) as exc:
        raise DistributedError(f"cannot join Ray at {address!r}: {_first_line(exc)}") from None
    # SIGTERM (a service manager's stop) ends it as Ctrl-C does: the app is deleted, not left behind
    previous = signal.signal(signal.SIGTERM, signal.default_int_handler)
    try:
        deploy_replicas(spec, replicas=replicas, host=host, port=port, **deploy)
        while True:
            time.sleep(1.0)
    except KeyboardInterrupt:
        pass
    finally:
        signal.signal(signal.SIGTERM, previous)
        serve.delete(APP_NAME)
        ray.shutdown()


def _first_line(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {lines[0] if lines else ''}"
