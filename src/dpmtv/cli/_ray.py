"""``--ray``, ``--workers``, ``--gpus-per-worker``, ``--ray-connect-timeout`` and
``--ray-insecure-network``: the commands whose per-chunk forward passes may run on Ray workers
(build, ``audit --sensitivity``), and the executor they make.

Before the command does any work, ``--ray`` is checked: the extra is installed, a head off this
machine has Ray's TLS on (or ``--ray-insecure-network``), and the head answers within
``--ray-connect-timeout`` (:mod:`dpmtv.distributed.network`)."""

from __future__ import annotations

import contextlib
import functools
from contextvars import ContextVar

import click

from dpmtv.errors import DistributedError, ParameterError

DEFAULT_CONNECT_TIMEOUT_S = 30.0
_CONNECT_TIMEOUT_S: ContextVar[float] = ContextVar(
    "dpmtv_ray_connect_timeout_s", default=DEFAULT_CONNECT_TIMEOUT_S
)


def ray_options(workers_return: str):
    """The options; ``workers_return`` says what a worker sends back (for ``--ray``'s help). The
    last two are consumed here (checked before the command runs), so commands see the first three."""

    def decorate(command):
        @functools.wraps(command)
        def with_checked_ray(*args, ray_connect_timeout_s, ray_insecure_network, **kwargs):
            _check_ray(kwargs["ray_address"], ray_connect_timeout_s, ray_insecure_network)
            token = _CONNECT_TIMEOUT_S.set(ray_connect_timeout_s)
            try:
                return command(*args, **kwargs)
            finally:
                _CONNECT_TIMEOUT_S.reset(token)

        function = click.option(
            "--ray-insecure-network",
            is_flag=True,
            help="Allow --ray to a head on another machine without Ray's TLS (RAY_USE_TLS=1): "
            "private records and un-noised partial sums then cross the network unencrypted.",
        )(with_checked_ray)
        function = click.option(
            "--ray-connect-timeout",
            "ray_connect_timeout_s",
            type=click.FloatRange(min=0, min_open=True),
            default=DEFAULT_CONNECT_TIMEOUT_S,
            show_default=True,
            help="Seconds to wait for the --ray head to answer before giving up.",
        )(function)
        function = click.option(
            "--gpus-per-worker",
            type=click.FloatRange(min=0),
            default=0.0,
            show_default=True,
            help="GPUs each Ray worker reserves (with --ray and --device cuda); fractions share a GPU.",
        )(function)
        function = click.option(
            "--workers",
            type=click.IntRange(min=1),
            default=2,
            show_default=True,
            help="Ray workers (with --ray), each loading the model once.",
        )(function)
        return click.option(
            "--ray",
            "ray_address",
            help="Run the chunks' forward passes on Ray workers: 'auto' (this machine's Ray "
            "cluster, or a new local one) or a cluster address (another machine needs "
            "RAY_USE_TLS=1 or --ray-insecure-network). Workers get chunk contents only "
            f"and return {workers_return}. Needs the ray extra: pip install -e '.[ray]' in the dpmtv "
            "source checkout.",
        )(function)

    return decorate


def _check_ray(ray_address, connect_timeout_s, insecure_network) -> None:
    """Before any work: the extra, the network's protection and a head that answers."""
    if ray_address is None:
        if insecure_network:
            raise ParameterError("--ray-insecure-network needs --ray")
        return
    from dpmtv.distributed.network import check_ray_network, wait_for_head
    from dpmtv.distributed.ray_executor import import_ray

    import_ray()
    check_ray_network(ray_address, insecure_network=insecure_network)
    try:
        wait_for_head(ray_address, connect_timeout_s=connect_timeout_s)
    except DistributedError as exc:
        raise DistributedError(f"{exc}; nothing was charged") from None


def check_ray_installed(ray_address: str | None) -> None:
    """Before any work: ``--ray`` without the extra is one line with the install command."""
    if ray_address is not None:
        from dpmtv.distributed.ray_executor import import_ray

        import_ray()


def ray_executor(ray_address, workers, gpus_per_worker, loaded, *, dtype, device):
    """A started Ray executor for ``--ray`` (a context manager: its actors stop after the
    command), else a null context giving None: this process. Ray is joined and the actors
    started here, before the command's first private computation: a failure to start says that
    nothing was charged."""
    if ray_address is None:
        if gpus_per_worker:
            raise ParameterError("--gpus-per-worker needs --ray")
        return contextlib.nullcontext(None)
    from dpmtv.distributed import RayExecutor
    from dpmtv.forward.executor import ModelSource
    from dpmtv.models.loading import current_load_options

    remote = current_load_options()
    not_sent = [
        flag
        for flag, value in (
            ("--revision", remote.revision),
            ("--attn-implementation", remote.attn_implementation),
            ("--adapter-weights", remote.adapter_weights),
        )
        if value is not None
    ]
    if not_sent:  # the workers would load another model than the driver's
        raise ParameterError(
            f"{', '.join(not_sent)} cannot be combined with --ray yet (the Ray workers would load "
            "--model without it)"
        )
    source = ModelSource(
        loaded.name_or_path,
        dtype=dtype,
        device=device,
        adapter_spec=None if remote.adapter_spec is None else str(remote.adapter_spec),
        trust_remote_code=remote.trust_remote_code,
    )
    executor = RayExecutor(
        source,
        workers=workers,
        address=ray_address,
        gpus_per_worker=gpus_per_worker,
        connect_timeout_s=_CONNECT_TIMEOUT_S.get(),
    )
    return _started(executor, loaded)


@contextlib.contextmanager
def _started(executor, loaded):
    with executor:
        try:
            executor.start(loaded)
        except DistributedError as exc:
            raise DistributedError(f"{exc}; nothing was charged") from None
        yield executor
