"""``dpmtv`` command line. Each command lives in its own module of this package, exposing a
click command named ``command``; modules are discovered and registered automatically."""

from __future__ import annotations

import importlib
import logging
import os
import pkgutil
import sys

import click

from dpmtv._version import __version__
from dpmtv.cli._common import DpmtvGroup


# Every option can also come from the environment: DPMTV_<COMMAND>_<OPTION> (click's
# auto_envvar_prefix, e.g. DPMTV_BUILD_EPSILON), and the shared model options from DPMTV_MODEL,
# DPMTV_DEVICE and DPMTV_DTYPE; a flag on the command line wins (docs/cli.md).
@click.group(cls=DpmtvGroup, context_settings={"auto_envvar_prefix": "DPMTV"})
@click.version_option(version=__version__, package_name="dpmtv")
@click.option(
    "--verbose", is_flag=True, help="Show the libraries' own progress bars and logs (transformers, datasets)."
)
def main(verbose: bool) -> None:
    """Differentially private many-shot multimodal in-context learning (DP-MTV)."""
    _idle_openmp_threads_sleep()
    _library_output(verbose=verbose)


def _idle_openmp_threads_sleep() -> None:
    """``OMP_WAIT_POLICY=PASSIVE`` unless the user set a policy: torch's OpenMP threads then sleep
    between parallel regions instead of spinning on their cores, which the prepare workers need
    to decode images while a small model's pass runs (docs/design.md §13, the first build). The
    thread count, and so every value computed, is unchanged. OpenMP reads the variable once, when
    torch loads it; the commands import torch only after this runs (tests/cli/test_startup.py)."""
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")


def _library_output(*, verbose: bool) -> None:
    """Silence transformers' and datasets' own bars and advisories ("Loading weights") unless
    --verbose: dpmtv shows its own progress. Environment variables reach libraries imported
    later; a library already imported is switched directly."""
    for name in ("HF_HUB_DISABLE_PROGRESS_BARS", "HF_DATASETS_DISABLE_PROGRESS_BARS"):
        os.environ[name] = "0" if verbose else "1"
    os.environ["TRANSFORMERS_VERBOSITY"] = "info" if verbose else "error"
    # torchao (the quantization extra) logs every optional CUDA kernel it cannot load at import;
    # torch logs deprecations of its pytree registry there too
    for name in ("torchao", "torch.utils._pytree"):
        logging.getLogger(name).setLevel(logging.INFO if verbose else logging.ERROR)
    if "transformers" in sys.modules:
        from transformers.utils import logging as transformers_logging

        transformers_logging.enable_progress_bar() if verbose else transformers_logging.disable_progress_bar()
        transformers_logging.set_verbosity_info() if verbose else transformers_logging.set_verbosity_error()


for _module in pkgutil.iter_modules(__path__):
    if not _module.name.startswith("_"):
        main.add_command(importlib.import_module(f"{__name__}.{_module.name}").command)


if __name__ == "__main__":
    sys.exit(main())
