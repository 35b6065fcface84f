"""``dpmtv`` command line. Each command lives in its own module of this package, exposing a
click command named ``command``; modules are discovered and registered automatically."""

from __future__ import annotations

import importlib
import pkgutil
import sys

import click

from dpmtv.cli._common import DpmtvGroup


@click.group(cls=DpmtvGroup)
@click.version_option(package_name="dpmtv")
def main() -> None:
    """Differentially private many-shot multimodal in-context learning (DP-MTV)."""


for _module in pkgutil.iter_modules(__path__):
    if not _module.name.startswith("_"):
        main.add_command(importlib.import_module(f"{__name__}.{_module.name}").command)


if __name__ == "__main__":
    sys.exit(main())
