"""The release noise a noise-aware candidate utility adds (``--selection-utility noisy-probability``,
docs/design.md §3): for each public candidate head set, the per-coordinate std ``σ_S`` the build's release
would draw if that candidate were chosen. Every number is public: the plan's Gaussian multiplier
(fixed before any private value is read; it does not depend on Δ), the public number of release
chunks ``m``, and the candidate's clip norms:

- a given C: the release's Δ is the worst case over the pool's layers whatever is chosen
  (:func:`dpmtv.pipeline.plan.sensitivity_clip_norms`), so ``σ_S`` is the plan's ``noise_std`` for
  every candidate;
- ``--l2-clip-norm private``: the release clips layer ``l`` at ``C_l = c·g_l(S)``, ``g_l(S)`` the
  candidate's heads' norm on the public blank-image prompt
  (:func:`dpmtv.pipeline.reference.public_layer_scales`), and ``c`` is chosen privately AFTER the
  selection; ``σ_S`` is planned at the public nominal multiplier
  ``PrivateSelectionSettings.noise_clip_multiplier`` instead:
  ``σ_S = multiplier · 2·c·sqrt(Σ_{l∈S} g_l(S)²) / m`` (:func:`dpmtv.privacy.l2_sensitivity`).

Why the choice stays ε_sel-DP whatever ``σ_S`` is: see :mod:`dpmtv.selection.candidates`.
"""

from __future__ import annotations

from collections.abc import Sequence

from dpmtv.heads import HeadSet
from dpmtv.models.loading import LoadedModel
from dpmtv.pipeline.plan import BuildPlan
from dpmtv.pipeline.reference import public_layer_scales
from dpmtv.pipeline.settings import BuildSettings
from dpmtv.privacy import l2_sensitivity

__all__ = ["candidate_release_std"]


def candidate_release_std(
    loaded: LoadedModel, candidates: Sequence[HeadSet], plan: BuildPlan, settings: BuildSettings
) -> tuple[float, ...]:
    """``σ_S`` per candidate (module docstring); all 0 for a non-private build."""
    release, selection = plan.release, settings.private_selection
    if release is None or selection is None:
        return (0.0,) * len(candidates)
    if settings.private_clip is None:
        return (float(release.noise_std),) * len(candidates)
    c, m = selection.noise_clip_multiplier, plan.layout.release_part.num_chunks
    out = []
    for candidate in candidates:
        scales = public_layer_scales(loaded, candidate, settings)
        delta = l2_sensitivity(
            l2_clip_norms=[c * scales[layer] for layer in candidate.layers],
            num_chunks=m,
            relation=settings.relation,
        )
        out.append(float(release.noise_multiplier * delta))
    return tuple(out)
