"""``dpmtv`` command line. Each command lives in its own module of this package, exposing a
click command named ``command``; modules are discovered and registered automatically."""

from __future__ import annotations

import importlib
import os
import pkgutil
import sys

import click

from dpmtv.cli._common import DpmtvGroup


@click.group(cls=DpmtvGroup)
@click.version_option(package_name="dpmtv")
@click.option(
    "--verbose", is_flag=True, help="Show the libraries' own progress bars and logs (transformers, datasets)."
)
def main(verbose: bool) -> None:
    """Differentially private many-shot multimodal in-context learning (DP-MTV)."""
    _library_output(verbose=verbose)


def _library_output(*, verbose: bool) -> None:
    """Silence transformers' and datasets' own bars and advisories ("Loading weights") unless
    --verbose: dpmtv shows its own progress. Environment variables reach libraries imported
    later; a library already imported is switched directly."""
    for name in ("HF_HUB_DISABLE_PROGRESS_BARS", "HF_DATASETS_DISABLE_PROGRESS_BARS"):
        os.environ[name] = "0" if verbose else "1"
    os.environ["TRANSFORMERS_VERBOSITY"] = "info" if verbose else "error"
    if "transformers" in sys.modules:
        from transformers.utils import logging

        logging.enable_progress_bar() if verbose else logging.disable_progress_bar()
        logging.set_verbosity_info() if verbose else logging.set_verbosity_error()


for _module in pkgutil.iter_modules(__path__):
    if not _module.name.startswith("_"):
        main.add_command(importlib.import_module(f"{__name__}.{_module.name}").command)


if __name__ == "__main__":
    sys.exit(main())
