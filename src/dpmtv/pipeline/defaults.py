"""The CLI defaults of ``build``, ``eval``, ``plan`` and ``attack``, in one module that imports nothing.

Every command's ``--help`` reads them, so they live apart from the settings and the clip-norm code
(which import the privacy maths and the model stack): a command that runs no model starts without
torch (docs/design.md §13, start-up).
"""

from __future__ import annotations

__all__ = ["DEFAULT_CLIP_QUANTILE", "DEFAULT_L2_CLIP_NORM", "DEFAULT_SHOTS_PER_CHUNK"]

# s = 8 records per chunk and C = 5 per layer, the scale of the embedded model's public clip norms.
# C changes the utility, not the guarantee (Δ scales with C and σ with Δ); `--l2-clip-norm auto`
# picks it from public records.
DEFAULT_SHOTS_PER_CHUNK = 8
DEFAULT_L2_CLIP_NORM = 5.0
DEFAULT_CLIP_QUANTILE = 0.5  # the median public chunk norm: about half the chunks are clipped
