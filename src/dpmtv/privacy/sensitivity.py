"""The L2 sensitivity of the released mean: the one place it is computed (docs/design.md §2)."""

from __future__ import annotations

import math
from collections.abc import Sequence

from dpmtv.errors import ParameterError
from dpmtv.privacy._checks import check_int, check_positive
from dpmtv.privacy.relation import AdjacencyRelation, parse_relation

__all__ = ["l2_sensitivity", "worst_case_clip_norms"]


def l2_sensitivity(
    *,
    l2_clip_norms: Sequence[float],
    num_chunks: int,
    relation: AdjacencyRelation | str,
) -> float:
    r"""L2 sensitivity ``Δ = 2·sqrt(Σ_l C_l²) / m`` of the concatenated mean, for both relations.

    Setting. The released vector is the concatenation over the ``L'`` selected layers of
    ``μ^(l) = (1/m) Σ_j â_j^(l)``, where ``â_j^(l)`` is chunk ``j``'s activation vector for layer
    ``l`` clipped to ``‖â_j^(l)‖₂ <= C_l`` (:func:`dpmtv.privacy.clip.clip_l2_per_layer`), and
    ``m`` is public. Chunk ``j``'s vectors depend only on the records of chunk ``j``.

    Replace-one (``N`` public, ``m = floor(N/s)``). The permutation that forms the chunks is drawn
    independently of the data and depends only on the public ``N``; couple the two neighbouring
    datasets through the same permutation. The replaced record then sits at one position, which
    lies in exactly one chunk ``j*`` (or in the unused tail, in which case nothing changes). All
    other chunks, hence their clipped vectors, are identical. For chunk ``j*`` and each layer,
    both the old and the new clipped vector have norm ``<= C_l``, so by the triangle inequality

        ‖â_{j*}^(l) − â'_{j*}^(l)‖₂ <= ‖â_{j*}^(l)‖₂ + ‖â'_{j*}^(l)‖₂ <= 2·C_l.

    The layer blocks are disjoint coordinates of the concatenation, so its change is at most
    ``sqrt(Σ_l (2·C_l)²) = 2·sqrt(Σ_l C_l²)``; dividing by the public ``m`` gives ``Δ``.

    Add-remove-one (``m`` public and fixed, record-addressed chunks). Each record's chunk is
    ``HMAC(key, id) mod m``, a function of its own id only (:mod:`dpmtv.privacy.partition`), so
    adding or removing one record changes the content of exactly one chunk ``j*``; every other
    chunk keeps the same records in the same order. The vector of ``j*`` moves from one vector of
    norm ``<= C_l`` to another (``<= 2·C_l`` as above), or between the zero vector of an empty
    chunk and a vector of norm ``<= C_l`` (``<= C_l`` would suffice for that case, but the
    ``2·C_l`` bound covers both). The sum is divided by the public ``m`` — never by the
    data-dependent number of non-empty chunks — so the same ``Δ`` holds.

    This ``Δ`` is the sensitivity under OUR relation; see :mod:`dpmtv.privacy.events` for how it
    enters dp-accounting (as a unit-sensitivity Gaussian event, analysed as ADD_OR_REMOVE_ONE).

    Args:
        l2_clip_norms: ``C_l`` for each of the ``L'`` selected layers (each > 0, finite).
        num_chunks: the public number of chunks ``m`` (>= 1).
        relation: ``replace-one`` or ``add-remove-one``.

    Returns:
        ``Δ``; for a uniform clip norm ``C`` this is ``2·C·sqrt(L') / m``.

    Raises:
        ParameterError: no clip norms, a clip norm not finite and > 0, ``m < 1``, or an unknown
            relation.
    """
    parse_relation(relation)  # both relations share the bound; validate the name anyway
    norms = _check_clip_norms(l2_clip_norms)
    num_chunks = check_int("num_chunks", num_chunks, minimum=1)
    return 2.0 * math.sqrt(math.fsum(c * c for c in norms)) / num_chunks


def worst_case_clip_norms(l2_clip_norms: Sequence[float], *, max_layers: int) -> list[float]:
    """The ``max_layers`` largest clip norms, largest first: what ``Δ`` is computed over when the
    released layers are not known before the noise is calibrated (private head selection).

    ``k`` privately selected heads occupy at most ``L' <= min(k, #pool layers)`` layers, and
    ``sqrt(Σ_{l in S} C_l²)`` over any set ``S`` of at most ``k`` pool layers is at most the sum
    over the ``k`` largest norms, so :func:`l2_sensitivity` of this list bounds the sensitivity of
    every possible selection. It must be data-independent (the calibration, and so the charge,
    comes before the votes), which a bound over the released layers would not be: adaptive
    composition needs one bound for all outcomes of the selection, not the realised one.
    """
    norms = _check_clip_norms(l2_clip_norms)
    return sorted(norms, reverse=True)[: check_int("max_layers", max_layers, minimum=1)]


def _check_clip_norms(l2_clip_norms: Sequence[float]) -> list[float]:
    norms = [check_positive(f"l2_clip_norms[{i}]", c) for i, c in enumerate(l2_clip_norms)]
    if not norms:
        raise ParameterError("l2_clip_norms must hold one norm per selected layer, got none")
    return norms
