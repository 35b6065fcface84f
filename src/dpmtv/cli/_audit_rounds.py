"""``dpmtv audit --sensitivity`` of a build with private rounds: the build's options for private
head selection (``--heads-from private``) and a private clip norm (``--l2-clip-norm private``),
with the build's defaults, turned into settings by the functions the build uses."""

from __future__ import annotations

import click

from dpmtv.cli._private_rounds import private_clip_settings, private_selection_settings
from dpmtv.errors import ParameterError
from dpmtv.pipeline.defaults import (
    CLIP_UTILITIES,
    DEFAULT_CLIP_EPSILON_FRACTION,
    DEFAULT_CLIP_QUANTILE,
    DEFAULT_CLIP_TOLERANCE,
    DEFAULT_CLIP_UTILITY,
)

__all__ = ["round_options", "round_settings"]

_SENSITIVITY = "--sensitivity, as for build: "

_OPTIONS = [
    click.option(
        "--heads-from",
        type=click.Choice(["private"]),
        help=_SENSITIVITY + "heads chosen by private selection on each D (instead of --heads).",
    ),
    click.option(
        "--private-selection",
        type=click.Choice(["votes", "candidates"]),
        default="votes",
        show_default=True,
        help=_SENSITIVITY + "the selection round (with --heads-from private).",
    ),
    click.option("--select-k", type=int, default=10, show_default=True, help=_SENSITIVITY + "k."),
    click.option("--selection-fraction", type=float, help=_SENSITIVITY + "the selection's share of ε."),
    click.option(
        "--selection-composition",
        type=click.Choice(["sequential", "parallel"]),
        default="sequential",
        show_default=True,
        help=_SENSITIVITY + "selection and release on all chunks or on disjoint halves.",
    ),
    click.option("--select-pool", default="all", show_default=True, help=_SENSITIVITY + "candidate heads."),
    click.option(
        "--selection-candidates",
        type=click.Choice(["layer-subsets", "layer-blocks", "layer-groups"]),
        default="layer-groups",
        show_default=True,
        help=_SENSITIVITY + "--private-selection candidates' public list.",
    ),
    click.option(
        "--selection-utility",
        type=click.Choice(
            ["correct", "probability", "noisy-correct", "noisy-probability", "released-probability"]
        ),
        help=_SENSITIVITY + "--private-selection candidates' per-chunk utility [default: as for build] "
        "(released-probability: every record's, on the pool's release; the audit fixes that release at "
        "D's un-noised mean; noisy-: the audit adds no noise, a fixed noise for which the bound holds).",
    ),
    click.option(
        "--epsilon",
        type=float,
        default=1.0,
        show_default=True,
        help=_SENSITIVITY + "the build's ε; with private rounds its shares set the seeded noise of "
        "the heads and C chosen on D (the measured utilities and means are un-noised).",
    ),
    click.option(
        "--clip-epsilon-fraction",
        type=float,
        default=DEFAULT_CLIP_EPSILON_FRACTION,
        show_default=True,
        help=_SENSITIVITY + "--l2-clip-norm private's share of ε.",
    ),
    click.option(
        "--clip-quantile",
        type=float,
        default=DEFAULT_CLIP_QUANTILE,
        show_default=True,
        help=_SENSITIVITY + "--l2-clip-norm private's quantile.",
    ),
    click.option(
        "--clip-utility",
        type=click.Choice(CLIP_UTILITIES),
        default=DEFAULT_CLIP_UTILITY,
        show_default=True,
        help=_SENSITIVITY + "--l2-clip-norm private's score.",
    ),
    click.option(
        "--clip-tolerance",
        type=float,
        default=DEFAULT_CLIP_TOLERANCE,
        show_default=True,
        help=_SENSITIVITY + "--clip-utility log-loss's tolerance factor (> 1).",
    ),
]


def round_options(function):
    """Decorate ``function`` with the private-round options above."""
    for option in reversed(_OPTIONS):
        function = option(function)
    return function


def round_settings(loaded, options) -> dict:
    """The settings fields of the rounds the options ask for: ``private_selection``,
    ``private_clip``, ``l2_clip_norm`` (provisional with a private C, as the build's) and ``epsilon``."""

    clip = options["l2_clip_norm"]
    if clip == "auto":
        raise ParameterError(
            "--sensitivity audits the build's clip norms as given or chosen privately: "
            "give C as a number or 'private' (an 'auto' C is a given C, chosen from public data)"
        )
    if (options["head_spec"] is None) == (options["heads_from"] is None):
        raise ParameterError("--sensitivity needs exactly one of --heads or --heads-from private")
    private = clip == "private"
    return {
        "private_selection": (
            private_selection_settings(loaded, options) if options["heads_from"] == "private" else None
        ),
        "private_clip": private_clip_settings(options) if private else None,
        "l2_clip_norm": (1.0,) if private else tuple(clip),
        "epsilon": options["epsilon"],
    }
