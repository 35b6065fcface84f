"""``--ray``, ``--workers`` and ``--gpus-per-worker``: the commands whose per-chunk forward passes
may run on Ray workers (build, ``audit --sensitivity``), and the executor they make."""

from __future__ import annotations

import contextlib

import click

from dpmtv.errors import ParameterError


def ray_options(workers_return: str):
    """The three options; ``workers_return`` says what a worker sends back (for ``--ray``'s help)."""

    def decorate(function):
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
            "cluster, or a new local one) or a cluster address. Workers get chunk contents only "
            f"and return {workers_return}. Needs the ray extra: pip install 'dpmtv[ray]'.",
        )(function)

    return decorate


def check_ray_installed(ray_address: str | None) -> None:
    """Before any work: ``--ray`` without the extra is one line with the install command."""
    if ray_address is not None:
        from dpmtv.distributed.ray_executor import import_ray

        import_ray()


def ray_executor(ray_address, workers, gpus_per_worker, loaded, *, dtype, device):
    """A Ray executor for ``--ray`` (a context manager: its actors stop after the command), else a
    null context giving None: this process."""
    if ray_address is None:
        if gpus_per_worker:
            raise ParameterError("--gpus-per-worker needs --ray")
        return contextlib.nullcontext(None)
    from dpmtv.distributed import RayExecutor
    from dpmtv.executor import ModelSource
    from dpmtv.models.loading import current_remote_code_options

    remote = current_remote_code_options()
    source = ModelSource(
        loaded.name_or_path,
        dtype=dtype,
        device=device,
        adapter_spec=None if remote.adapter_spec is None else str(remote.adapter_spec),
        trust_remote_code=remote.trust_remote_code,
    )
    return RayExecutor(source, workers=workers, address=ray_address, gpus_per_worker=gpus_per_worker)
