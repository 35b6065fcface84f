from __future__ import annotations

import ipaddress

import click

from dpmtv.cli._common import err_console, guarantee_text, model_options, trusted_key_option
from dpmtv.cli._config_file import config_options
from dpmtv.cli._serve_ray import ray_serve_options, replica_spec, serve_on_ray
from dpmtv.errors import ParameterError

API_KEY_ENV = "DPMTV_API_KEY"


@click.command(name="serve")
@model_options
@click.option(
    "--vector",
    "vector_specs",
    multiple=True,
    metavar="NAME=PATH",
    help="Serve a task vector under NAME (repeatable); clients put NAME in 'model'. The bare model "
    "answers zero-shot under the last path component of --model.",
)
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to bind.")
@click.option("--port", type=int, default=8000, show_default=True)
@click.option(
    "--api-key", envvar=API_KEY_ENV, help=f"Require 'Authorization: Bearer KEY' (or ${API_KEY_ENV})."
)
@click.option(
    "--insecure-no-auth",
    is_flag=True,
    help="Allow binding a non-loopback address without --api-key (anyone who reaches it can query).",
)
@click.option(
    "--patch-mode",
    type=click.Choice(["auto", "every-call", "prefill-only"]),
    default="auto",
    show_default=True,
    help="As for `dpmtv answer`: auto takes the checkpoint's recommendation.",
)
@click.option(
    "--max-batch-size", type=int, default=32, show_default=True, help="1 turns dynamic batching off."
)
@click.option(
    "--batch-window-ms",
    type=float,
    default=5.0,
    show_default=True,
    help="How long a request that finds the server idle waits for others to batch with.",
)
@click.option(
    "--prepare-workers",
    type=int,
    default=2,
    show_default=True,
    help="Threads that parse, check and decode large requests (over 64 KiB, or images over 256² "
    "pixels), off the event loop and the model; smaller ones are prepared on the loop.",
)
@click.option(
    "--max-queue",
    type=int,
    default=256,
    show_default=True,
    help="Requests allowed to wait; beyond it the server answers 429.",
)
@click.option(
    "--max-tokens",
    type=int,
    default=256,
    show_default=True,
    help="The server's cap on generated tokens: a larger max_tokens is cut here (finish_reason 'length').",
)
@click.option(
    "--default-max-tokens",
    type=int,
    default=16,
    show_default=True,
    help="max_tokens when a request does not say.",
)
@click.option("--max-body-bytes", type=int, default=8 * 1024 * 1024, show_default=True)
@click.option(
    "--max-image-pixels",
    type=int,
    default=4096 * 4096,
    show_default=True,
    help="Largest width×height accepted per image (read from its header).",
)
@click.option(
    "--max-request-pixels",
    type=int,
    default=4 * 4096 * 4096,
    show_default=True,
    help="Largest width×height summed over one request's images.",
)
@click.option(
    "--max-pixels-in-flight",
    type=int,
    default=8 * 4096 * 4096,
    show_default=True,
    help="Decoded pixels all admitted requests may hold together; beyond it, 429.",
)
@click.option("--max-images", type=int, default=16, show_default=True, help="Images per request.")
@click.option(
    "--allowed-host",
    "allowed_hosts",
    multiple=True,
    metavar="NAME",
    help="Host name accepted without --api-key (repeatable; default: 127.0.0.1, localhost, ::1; '*': any).",
)
@click.option(
    "--allowed-origin",
    "allowed_origins",
    multiple=True,
    metavar="ORIGIN",
    help="Cross-origin caller allowed, with CORS headers, e.g. http://localhost:3000 (repeatable; '*': any).",
)
@click.option(
    "--header-timeout-s", type=float, default=10.0, show_default=True, help="Time for request headers."
)
@click.option(
    "--body-timeout-s", type=float, default=30.0, show_default=True, help="Time for a request body."
)
@click.option(
    "--max-connections",
    type=int,
    help="Open connections; at the cap a new one closes the longest-idle one, or gets 503 when all "
    "have a request in progress (default: 512, or ulimit -n minus 100 if lower).",
)
@click.option(
    "--keep-alive-s",
    type=float,
    default=30.0,
    show_default=True,
    help="Idle keep-alive connection timeout. Short timeouts race with clients reusing a connection "
    "(a reset mid-request) when the machine is busy.",
)
@click.option(
    "--threads",
    type=int,
    help="torch CPU threads (default: torch's choice). On a shared CPU, 1 avoids oversubscription.",
)
@click.option(
    "--workers",
    type=click.IntRange(min=1),
    default=1,
    show_default=True,
    help="Server processes on this machine, sharing the port, each loading its own copy of the model "
    "with its own batcher and limits (every limit is per worker). One process uses about one core "
    "(one interpreter lock); on a CPU, give about one worker per core with --threads 1.",
)
@click.option(
    "--log-level",
    default="info",
    show_default=True,
    type=click.Choice(["critical", "error", "warning", "info", "debug"]),
)
@click.option(
    "--require-signature",
    is_flag=True,
    help="Refuse to start unless every vector is signed by a --trusted-key (and refuse to start "
    "without one); without a trusted key the server serves, and says, unverified claims.",
)
@ray_serve_options
@trusted_key_option
@config_options
def command(
    model_path,
    vector_specs,
    host,
    port,
    api_key,
    insecure_no_auth,
    patch_mode,
    keep_alive_s,
    threads,
    workers,
    log_level,
    trusted_keys,
    dtype,
    device,
    ray_serving,
    **limits,
):
    """Serve task vectors over an OpenAI-compatible HTTP API and a web page at /.

    Queries are post-processing of released vectors: the server accepts no private records and
    spends no privacy budget. Each vector is checked like `dpmtv answer` (tensor hash, model
    fingerprint and, with --trusted-key, its signature over it and its card) and refused at
    start-up if it fails; without a trusted key the start-up lines and /v1/models say that its
    signature was not verified. With --workers, that many server processes here, and with --ray,
    --replicas copies behind Ray Serve's proxy, answer on --host/--port; each loads and checks the
    model and vectors itself.
    """
    check_bind(host, api_key=api_key, insecure_no_auth=insecure_no_auth)
    if workers > 1 and ray_serving is not None:
        raise ParameterError("--workers and --ray exclude each other: with --ray, give --replicas")
    try:
        import uvicorn

        from dpmtv.serve import create_app, load_served_model, parse_vector_spec
        from dpmtv.serve._connections import install_log_rate_limit, uvicorn_config
    except ImportError:
        raise click.ClickException("dpmtv serve needs the serve extra: pip install -e '.[serve]'") from None
    settings = _settings(api_key, limits, trusted_keys)
    _set_threads(threads)
    vectors = [parse_vector_spec(spec) for spec in vector_specs]
    load = {"dtype": dtype, "device": device, "patch_mode": None if patch_mode == "auto" else patch_mode}
    served = load_served_model(model_path, vectors, trusted_keys=settings.trusted_keys, **load)
    _print_start_up(served, host, port)
    if ray_serving is not None or workers > 1:
        del served  # checked here; each replica or worker loads and checks its own copy
        spec = replica_spec(model_path, vectors, settings, threads=threads, **load)
        _serve_copies(spec, ray_serving, workers, (host, port, keep_alive_s, log_level))
        return
    install_log_rate_limit()
    app = create_app(served, settings)
    uvicorn.Server(
        uvicorn_config(app, settings, host=host, port=port, log_level=log_level, keep_alive_s=keep_alive_s)
    ).run()


def _serve_copies(spec, ray_serving, workers: int, bind) -> None:
    """Serve copies of the checked server: Ray Serve replicas, or worker processes here; ``bind``
    is (host, port, keep-alive seconds, log level)."""
    if ray_serving is not None:
        serve_on_ray(ray_serving, spec, bind)
        return
    from dpmtv.serve.workers import serve_workers

    host, port, keep_alive_s, log_level = bind
    serve_workers(spec, workers=workers, host=host, port=port, log_level=log_level, keep_alive_s=keep_alive_s)


def _set_threads(threads: int | None) -> None:
    if threads is not None:
        import torch

        if threads < 1:
            raise ParameterError(f"--threads must be at least 1, got {threads}")
        torch.set_num_threads(threads)


def _print_start_up(served, host: str, port: int) -> None:
    """One line per vector: its guarantee and what was verified of its signature; then the page."""
    from rich.markup import escape

    from dpmtv.artifact.signature import signature_words

    for name, vector in served.vectors.items():
        guarantee = guarantee_text(vector.vector.metadata.privacy)
        signed = signature_words(vector.vector.signer, vector.path)
        line = f"serving vector [bold]{name}[/] ({vector.path}): {guarantee}; {escape(signed)}"
        err_console.print(line, highlight=False)
    err_console.print(
        f"zero-shot model name: [bold]{served.name}[/]; page at http://{_url_host(host)}:{port}/",
        highlight=False,
    )


def _settings(api_key: str | None, limits: dict, trusted_keys=()):
    """The server's limits from the options (checked, with the API key, before the model loads)."""
    from dpmtv.serve import ServeSettings
    from dpmtv.serve._connections import default_max_connections
    from dpmtv.serve._settings import LOOPBACK_HOSTS

    limits["allowed_hosts"] = tuple(limits["allowed_hosts"]) or LOOPBACK_HOSTS
    limits["allowed_origins"] = tuple(limits["allowed_origins"])
    limits["max_connections"] = limits["max_connections"] or default_max_connections()
    return ServeSettings(api_key=api_key or None, trusted_keys=tuple(trusted_keys), **limits)


def check_bind(host: str, *, api_key: str | None, insecure_no_auth: bool) -> None:
    """Refuse a non-loopback bind without a key: anyone who can reach the port could query."""
    if api_key or insecure_no_auth or _is_loopback(host):
        return
    raise ParameterError(
        f"--host {host} is reachable from other machines; give --api-key KEY (or set ${API_KEY_ENV}), "
        "or pass --insecure-no-auth to serve without authentication"
    )


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _url_host(host: str) -> str:
    return f"[{host}]" if ":" in host else host
