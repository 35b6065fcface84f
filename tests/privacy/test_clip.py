from __future__ import annotations

import numpy as np
import pytest

from dpmtv.errors import NumericalError, ParameterError
from dpmtv.privacy import clip_l2_per_layer, parse_l2_clip_norms


def _norms(x):
    return np.linalg.norm(x, axis=1)


def test_norms_after_are_min_of_norm_and_c_and_direction_is_kept():
    rng = np.random.default_rng(0)
    rows = rng.normal(size=(50, 16)) * rng.uniform(0.01, 5, size=(50, 1))
    out = clip_l2_per_layer({3: rows}, l2_clip_norms={3: 1.0})[3]
    np.testing.assert_allclose(_norms(out), np.minimum(_norms(rows), 1.0), rtol=1e-12)
    assert (_norms(out) <= 1.0).all()
    # same direction: out = rows * positive scalar per row
    cosine = np.sum(out * rows, axis=1) / (_norms(out) * _norms(rows))
    np.testing.assert_allclose(cosine, 1.0, rtol=1e-12)
    small = _norms(rows) <= 1.0
    np.testing.assert_array_equal(out[small], rows[small])


def test_zero_row_stays_zero_and_output_is_float64():
    rows = np.zeros((2, 4), dtype=np.float32)
    rows[1] = [3, 4, 0, 0]
    out = clip_l2_per_layer({0: rows}, l2_clip_norms={0: 1.0})[0]
    assert out.dtype == np.float64
    np.testing.assert_array_equal(out[0], 0.0)
    np.testing.assert_allclose(out[1], [0.6, 0.8, 0, 0], rtol=1e-12)


def test_each_layer_uses_its_own_norm():
    rows = np.full((3, 4), 10.0)
    out = clip_l2_per_layer({1: rows, 5: rows}, l2_clip_norms={1: 0.5, 5: 2.0})
    np.testing.assert_allclose(_norms(out[1]), 0.5, rtol=1e-12)
    np.testing.assert_allclose(_norms(out[5]), 2.0, rtol=1e-12)


def test_huge_finite_values_clip_without_overflow():
    rows = np.full((1, 8), 1e200)
    out = clip_l2_per_layer({0: rows}, l2_clip_norms={0: 3.0})[0]
    assert np.isfinite(out).all() and _norms(out)[0] <= 3.0
    assert _norms(out)[0] == pytest.approx(3.0, rel=1e-12)


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_non_finite_names_layer_and_row(bad):
    rows = np.ones((4, 3))
    rows[2, 1] = bad
    with pytest.raises(NumericalError, match="layer 7: row 2"):
        clip_l2_per_layer({7: rows}, l2_clip_norms={7: 1.0})


@pytest.mark.parametrize("norm", [0.0, -1.0, np.nan, np.inf])
def test_invalid_clip_norm_names_layer(norm):
    with pytest.raises(ParameterError, match="layer 4"):
        clip_l2_per_layer({4: np.ones((1, 2))}, l2_clip_norms={4: norm})


def test_missing_clip_norm_names_layer():
    with pytest.raises(ParameterError, match="no clip norm given for layer 9"):
        clip_l2_per_layer({9: np.ones((1, 2))}, l2_clip_norms={8: 1.0})


def test_parse_clip_norms():
    assert parse_l2_clip_norms([2.0], [5, 1, 3]) == {1: 2.0, 3: 2.0, 5: 2.0}
    assert parse_l2_clip_norms([1.0, 2.0, 3.0], [5, 1, 3]) == {1: 1.0, 3: 2.0, 5: 3.0}
    with pytest.raises(ParameterError, match="expected 1 clip norm or 3"):
        parse_l2_clip_norms([1.0, 2.0], [5, 1, 3])
    with pytest.raises(ParameterError, match="layer 3"):
        parse_l2_clip_norms([1.0, -2.0, 3.0], [5, 1, 3])
