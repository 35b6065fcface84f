from __future__ import annotations

import math

import pytest

from dpmtv.errors import ParameterError
from dpmtv.privacy import AdjacencyRelation, l2_sensitivity


@pytest.mark.parametrize("relation", list(AdjacencyRelation))
def test_uniform_clip_norm(relation):
    # 2 C sqrt(L') / m with C = 1.5, L' = 4, m = 10
    got = l2_sensitivity(l2_clip_norms=[1.5] * 4, num_chunks=10, relation=relation)
    assert got == pytest.approx(2 * 1.5 * math.sqrt(4) / 10, rel=1e-15)


def test_per_layer_clip_norms():
    # 2 sqrt(3^2 + 4^2) / 5 = 2
    got = l2_sensitivity(l2_clip_norms=[3.0, 4.0], num_chunks=5, relation="replace-one")
    assert got == pytest.approx(2.0, rel=1e-15)


def test_relations_share_the_bound():
    kwargs = {"l2_clip_norms": [0.5, 2.0, 1.0], "num_chunks": 7}
    assert l2_sensitivity(**kwargs, relation="replace-one") == l2_sensitivity(
        **kwargs, relation="add-remove-one"
    )


@pytest.mark.parametrize(
    ("norms", "chunks", "relation", "match"),
    [
        ([], 3, "replace-one", "got none"),
        ([1.0, 0.0], 3, "replace-one", r"l2_clip_norms\[1\]"),
        ([math.inf], 3, "replace-one", r"l2_clip_norms\[0\]"),
        ([1.0], 0, "replace-one", "num_chunks"),
        ([1.0], 3, "swap-one", "unknown neighbouring relation"),
    ],
)
def test_invalid_inputs(norms, chunks, relation, match):
    with pytest.raises(ParameterError, match=match):
        l2_sensitivity(l2_clip_norms=norms, num_chunks=chunks, relation=relation)
