from __future__ import annotations

import copy
import pickle

import numpy as np
import pytest

from dpmtv.errors import (
    DangerousModeError,
    NoiseAlreadyAddedError,
    NumericalError,
    ParameterError,
)
from dpmtv.privacy import ClippedSumAccumulator, UnnoisedMean
from dpmtv.privacy.aggregate import max_clipped_sum_norm
from dpmtv.privacy.clip import clip_l2_per_layer

DIMS = {2: 3, 0: 5}


def _rows(rng, batch):
    return {layer: rng.normal(size=(batch, dim)) for layer, dim in DIMS.items()}


def _values(mean: UnnoisedMean) -> dict[int, np.ndarray]:
    return mean._consume()  # tests only; the library reads it in privacy.release


def test_streaming_equals_batch_mean():
    rng = np.random.default_rng(1)
    batches = [_rows(rng, b) for b in (3, 1, 4, 2)]
    acc = ClippedSumAccumulator(DIMS)
    for batch in batches:
        acc.add(batch)
    assert acc.num_rows == 10
    got = _values(acc.mean(num_chunks=10))
    for layer in DIMS:
        expected = np.concatenate([b[layer] for b in batches]).mean(axis=0)
        np.testing.assert_allclose(got[layer], expected, rtol=1e-13)


def test_divides_by_public_num_chunks_not_row_count():
    acc = ClippedSumAccumulator({0: 2})
    acc.add({0: np.array([[1.0, 2.0], [3.0, 4.0]])})
    got = _values(acc.mean(num_chunks=8))  # 6 empty chunks contribute zero
    np.testing.assert_allclose(got[0], [4.0 / 8, 6.0 / 8])


def test_refuses_more_rows_than_chunks_and_second_mean():
    acc = ClippedSumAccumulator({0: 2})
    acc.add({0: np.ones((3, 2))})
    with pytest.raises(ParameterError, match="3 chunk rows .* num_chunks is 2"):
        acc.mean(num_chunks=2)
    acc.mean(num_chunks=3)
    with pytest.raises(NoiseAlreadyAddedError):
        acc.mean(num_chunks=3)
    with pytest.raises(NoiseAlreadyAddedError):
        acc.add({0: np.ones((1, 2))})


def test_merge_equals_single_accumulator():
    rng = np.random.default_rng(2)
    batches = [_rows(rng, 2) for _ in range(4)]
    single, left, right = (ClippedSumAccumulator(DIMS) for _ in range(3))
    for i, batch in enumerate(batches):
        single.add(batch)
        (left if i % 2 else right).add(batch)
    left.merge(right)
    assert left.num_rows == single.num_rows == 8
    a, b = _values(left.mean(num_chunks=9)), _values(single.mean(num_chunks=9))
    for layer in DIMS:
        np.testing.assert_allclose(a[layer], b[layer], rtol=1e-13)


def test_merge_refuses_other_layout():
    with pytest.raises(ParameterError, match="cannot merge"):
        ClippedSumAccumulator({0: 2}).merge(ClippedSumAccumulator({0: 3}))


def test_add_validates_batches():
    acc = ClippedSumAccumulator(DIMS)
    with pytest.raises(ParameterError, match="expected layers"):
        acc.add({0: np.ones((1, 5))})
    with pytest.raises(ParameterError, match=r"layer 2: expected shape \(B, 3\)"):
        acc.add({0: np.ones((1, 5)), 2: np.ones((1, 4))})
    with pytest.raises(ParameterError, match="same number of rows"):
        acc.add({0: np.ones((1, 5)), 2: np.ones((2, 3))})
    bad = np.ones((1, 3))
    bad[0, 0] = np.nan
    with pytest.raises(NumericalError, match="layer 2"):
        acc.add({0: np.ones((1, 5)), 2: bad})
    assert acc.num_rows == 0


def _mean_with(value: float) -> UnnoisedMean:
    acc = ClippedSumAccumulator({4: 3})
    acc.add({4: np.full((1, 3), value)})
    return acc.mean(num_chunks=1)


def test_unnoised_mean_refuses_pickle_and_copy():
    mean = _mean_with(0.123456789)
    for leak in (pickle.dumps, copy.copy, copy.deepcopy):
        with pytest.raises(DangerousModeError, match="never leaves process memory"):
            leak(mean)


def test_unnoised_mean_repr_hides_values_and_has_no_public_accessor():
    mean = _mean_with(0.123456789)
    text = repr(mean) + str(mean)
    assert "123456" not in text
    assert "(3,)" in text
    public = {name for name in dir(mean) if not name.startswith("_")}
    assert public == {"consumed", "layer_dims", "num_chunks"}
    assert mean.layer_dims == {4: 3} and mean.num_chunks == 1


def test_accumulator_repr_hides_values():
    acc = ClippedSumAccumulator({0: 2})
    acc.add({0: np.array([[0.987654321, 0.5]])})
    assert "987654" not in repr(acc)


def test_consume_once():
    mean = _mean_with(1.0)
    assert not mean.consumed
    mean._consume()
    assert mean.consumed
    with pytest.raises(NoiseAlreadyAddedError):
        mean._consume()


@pytest.mark.parametrize("num_rows, dim", [(1, 8), (4, 64), (1000, 32)])
def test_aligned_rows_at_the_clip_norm_stay_within_the_partial_sum_bound(num_rows, dim):
    """The worst case for the bound: every row points the same way at norm C (clipped ones at
    C·(1 − 2⁻⁴⁰), unclipped ones with a computed norm of C up to rounding)."""
    rng = np.random.default_rng(dim)
    direction = rng.normal(size=dim)
    clip_norm = 3.7
    rows = np.tile(direction / np.linalg.norm(direction) * clip_norm, (num_rows, 1))
    rows[::2] *= 10.0  # half of them far above C: clipped
    accumulator = ClippedSumAccumulator({0: dim})
    for row in clip_l2_per_layer({0: rows}, l2_clip_norms={0: clip_norm})[0]:
        accumulator.add({0: row[None, :]})
    bound = max_clipped_sum_norm(clip_norm, num_rows=num_rows, dim=dim)
    assert accumulator.layers_above({0: bound}) == []
    assert bound <= num_rows * clip_norm * (1 + 1e-12)  # a tolerance of rounding only


def test_a_sum_inflated_by_one_part_in_a_billion_is_above_the_bound():
    dim, num_rows, clip_norm = 64, 4, 2.0
    row = np.full(dim, clip_norm / np.sqrt(dim))
    bound = max_clipped_sum_norm(clip_norm, num_rows=num_rows, dim=dim)
    inflated = ClippedSumAccumulator.of({0: np.tile(row * (1 + 1e-9), (num_rows, 1))})
    assert inflated.layers_above({0: bound}) == [0]
