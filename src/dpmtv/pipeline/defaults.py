"""The CLI defaults of ``build``, ``eval``, ``plan`` and ``attack``, in one module that imports nothing.

Every command's ``--help`` reads them, so they live apart from the settings and the clip-norm code
(which import the privacy maths and the model stack): a command that runs no model starts without
torch (docs/design.md §13, start-up).
"""

from __future__ import annotations

__all__ = [
    "CLIP_UTILITIES",
    "DEFAULT_CLIP_EPSILON_FRACTION",
    "DEFAULT_CLIP_QUANTILE",
    "DEFAULT_CLIP_TOLERANCE",
    "DEFAULT_CLIP_UTILITY",
    "DEFAULT_L2_CLIP_NORM",
    "DEFAULT_SHOTS_PER_CHUNK",
]

# s = 8 records per chunk and C = 5 per layer, the scale of the embedded model's public clip norms.
# C changes the utility, not the guarantee (Δ scales with C and σ with Δ); `--l2-clip-norm auto`
# picks it from public records.
DEFAULT_SHOTS_PER_CHUNK = 8
DEFAULT_L2_CLIP_NORM = 5.0
DEFAULT_CLIP_QUANTILE = 0.5  # the median public chunk norm: about half the chunks are clipped

# `--l2-clip-norm private`: the round's share of ε, its score and the log-loss tolerance factor,
# chosen on the DEV set of benchmarks/private_only.py --split dev (docs/design.md §2).
# CLIP_UTILITIES repeats dpmtv.privacy.clip_quantile.CLIP_UTILITIES, which --help cannot import
# (the privacy package loads dp-accounting); a test keeps the two equal.
CLIP_UTILITIES = ("quantile", "log-loss")
DEFAULT_CLIP_EPSILON_FRACTION = 0.2
DEFAULT_CLIP_UTILITY = "log-loss"
DEFAULT_CLIP_TOLERANCE = 4.0
