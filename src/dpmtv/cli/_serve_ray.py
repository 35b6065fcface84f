"""``dpmtv serve --ray ADDRESS --replicas N``: the options, checked before the model loads, and
the hand-over to :mod:`dpmtv.serve.ray_replicas` once the command has checked the vectors."""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass
from pathlib import Path

import click

from dpmtv.errors import DistributedError, ParameterError

_DEFAULT_REPLICAS = 2
_CONNECT_TIMEOUT_S = 30.0
# What a remote head's unencrypted Ray traffic would carry (the settings go to every replica)
_CROSSING = "the queries, their answers and the API key"


@dataclass(frozen=True)
class RayServing:
    address: str
    replicas: int
    cpus_per_replica: float


def ray_serve_options(command):
    """Adds --ray, --replicas, --cpus-per-replica and --ray-insecure-network; the command gets
    ``ray_serving``: a checked :class:`RayServing`, or None without --ray."""

    @functools.wraps(command)
    def with_ray(*args, ray_address, replicas, cpus_per_replica, ray_insecure_network, **kwargs):
        serving = _check(ray_address, replicas, cpus_per_replica, ray_insecure_network)
        return command(*args, ray_serving=serving, **kwargs)

    options = [
        click.option(
            "--ray",
            "ray_address",
            metavar="ADDRESS",
            help="Serve through Ray Serve: --replicas copies of this server behind one endpoint on "
            "--host/--port. 'local' starts a Ray cluster here, 'auto' joins this machine's (or "
            "starts one), else a cluster address (on another machine it needs RAY_USE_TLS=1 or "
            "--ray-insecure-network). Needs the ray extra: pip install -e '.[ray]'.",
        ),
        click.option(
            "--replicas",
            type=click.IntRange(min=1),
            help=f"Ray Serve replicas (with --ray; default {_DEFAULT_REPLICAS}), each loading the "
            "model and the vectors with the same checks.",
        ),
        click.option(
            "--cpus-per-replica",
            type=click.FloatRange(min=0),
            help="CPUs each replica reserves on the Ray cluster (with --ray; default 1).",
        ),
        click.option(
            "--ray-insecure-network",
            is_flag=True,
            help="Allow --ray to a head on another machine without Ray's TLS: the queries, answers "
            "and the API key then cross Ray's network unencrypted.",
        ),
    ]
    for option in reversed(options):
        with_ray = option(with_ray)
    return with_ray


def _check(address, replicas, cpus_per_replica, insecure_network) -> RayServing | None:
    if address is None:
        given = [
            name
            for name, value in (
                ("--replicas", replicas),
                ("--cpus-per-replica", cpus_per_replica),
                ("--ray-insecure-network", insecure_network or None),
            )
            if value is not None
        ]
        if given:
            raise ParameterError(f"{', '.join(given)} needs --ray")
        return None
    from dpmtv.distributed.network import check_ray_network, wait_for_head
    from dpmtv.distributed.ray_executor import INSTALL_LINE, import_ray

    import_ray()
    try:
        import ray.serve  # noqa: F401
    except ImportError:
        raise DistributedError(f"--ray needs Ray Serve (ray[serve]): {INSTALL_LINE}") from None
    check_ray_network(address, insecure_network=insecure_network, crossing=_CROSSING)
    wait_for_head(address, connect_timeout_s=_CONNECT_TIMEOUT_S)
    return RayServing(
        address,
        _DEFAULT_REPLICAS if replicas is None else replicas,
        1.0 if cpus_per_replica is None else cpus_per_replica,
    )


def serve_on_ray(serving: RayServing, spec, bind) -> None:
    """Serve ``spec`` (:func:`replica_spec`) until interrupted on ``bind`` (host, port,
    keep-alive seconds, log level)."""
    from dpmtv.serve.ray_replicas import serve_forever

    host, port, keep_alive_s, log_level = bind
    serve_forever(
        spec,
        address=serving.address,
        replicas=serving.replicas,
        host=host,
        port=port,
        cpus_per_replica=serving.cpus_per_replica,
        keep_alive_s=keep_alive_s,
        log_level=log_level,
    )


def replica_spec(model_path: str, vectors, settings, **load):
    """What each replica loads: the command's model, vectors, settings and model options, with
    local paths made absolute (a replica's working directory is Ray's)."""
    from dpmtv.models.loading import current_load_options
    from dpmtv.serve.ray_replicas import ReplicaSpec

    options = current_load_options()
    options = dataclasses.replace(
        options,
        adapter_spec=_absolute(options.adapter_spec),
        adapter_weights=_absolute(options.adapter_weights),
    )
    settings = dataclasses.replace(settings, trusted_keys=tuple(p.resolve() for p in settings.trusted_keys))
    named = tuple((name, Path(path).resolve()) for name, path in vectors)
    return ReplicaSpec(str(_absolute(model_path)), named, settings, load=options, **load)


def _absolute(value):
    """A local path made absolute; a hub id, a named adapter spec or None as it is."""
    return value if value is None or not Path(value).exists() else Path(value).resolve()
