"""Streaming sum of clipped chunk vectors and the un-noised mean (docs/design.md §2).

``μ^(l) = (1/m) Σ_j â_j^(l)``. The accumulator keeps a compensated float64 sum per layer, so
memory is constant in the number of records ``N`` and chunks ``m``; batches of chunks are added as
they come out of the model, and accumulators of distributed workers are combined with
:meth:`ClippedSumAccumulator.merge` before the driver adds noise once.

Floating point, and why the mean is divided by ``m·(1 + κ)`` (derivation). The sensitivity
``Δ`` (:mod:`dpmtv.privacy.sensitivity`) bounds the EXACT means of neighbours; the release noises
the COMPUTED mean ``μ̃``, so ``‖μ̃(D) − μ̃(D')‖ <= Δ`` is what must hold. Let every clipped row
have ``‖x_j‖ <= C'`` (exactly; :mod:`dpmtv.privacy.clip` keeps ``C' = C·(1 − 2⁻⁴⁰)``) and
``S = Σ_j x_j``, ``u = 2⁻⁵³``. Per coordinate:

1. each batch is summed exactly and rounded once (``math.fsum``): ``b_k = S_k(1 + δ_k)``,
   ``|δ_k| <= u``, so ``Σ_k |b_k − S_k| <= u·Σ_j |x_j|``;
2. the ``n`` batch sums (and a merged accumulator's two components) are added by compensated
   summation (TwoSum with a running compensation: Ogita, Rump & Oishi's Sum2, SIAM J. Sci.
   Comput. 26, 2005, Prop. 4.5): ``|s̃ − Σ b_k| <= u·|Σ b_k| + γ_{n−1}²·Σ|b_k|``,
   ``γ_k = k·u/(1 − k·u)``;
3. ``μ̃ = fl(s̃ / fl(m·fl(1 + κ)))`` adds three relative roundings ``<= u`` each (the divisor's
   two and the division).

With ``Σ_j ‖x_j‖ <= m·C'`` (at most ``m`` rows) and the L2 norm over coordinates, ``‖μ̃ − S/(m(1+κ))‖
<= η·C'`` with ``η = 6u + 2γ_{n−1}²`` (``5u`` from the five roundings, one ``u`` and the factor
2 on ``γ²`` covering the products of ``u`` terms). Neighbours differ
by ``‖S − S'‖ <= 2C'`` exactly (the sensitivity proof), so

    ‖μ̃(D) − μ̃(D')‖ <= 2C'/(m(1 + κ)) + 2η·C' = (2C'/m)·(1 + η·m)/(1 + κ) <= 2C'/m  if κ >= η·m,

and per layer block the same factor, so the concatenation stays within ``Δ``. ``n`` must not be
a private count: empty batches and empty merges add nothing, so ``n <= 3m`` (a row per batch at
least, two components per merge of a non-empty accumulator), and :func:`summation_slack` uses
``η(3m)``. At ``m = 10⁶``, ``κ ≈ 6.7e-10``: the released mean is scaled by ``1 − 6.7e-10``,
far below any noise. (Plain float64 summation would need ``κ ≈ m²·u``, 1.1e-4 at ``m = 10⁶``; it
measured 3.2e-10·Δ of rounding at ``m = 10⁶``, above the 9.1e-13·Δ that the clip margin leaves.)

The result, :class:`UnnoisedMean`, is the most sensitive object in the library: it has no public
accessor of its values, refuses pickling and copying, and is consumed exactly once by
:func:`dpmtv.privacy.release.add_gaussian_noise` (or the explicitly non-private release).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import NoReturn

import numpy as np

from dpmtv.errors import (
    DangerousModeError,
    NoiseAlreadyAddedError,
    NumericalError,
    ParameterError,
)
from dpmtv.privacy._checks import check_int

__all__ = ["ClippedSumAccumulator", "UnnoisedMean", "max_clipped_sum_norm", "summation_slack"]

_NEVER_LEAVES = "the un-noised aggregate never leaves process memory"
_UNIT_ROUNDOFF = 2.0**-53


def summation_slack(num_chunks: int) -> float:
    """``κ = η(3m)·m`` with ``η(n) = 6u + 2γ_n²``: the mean is divided by ``m·(1 + κ)`` so that
    rounding cannot carry neighbours' computed means further apart than ``Δ`` (module docstring).
    A function of the public ``m`` only."""
    m = check_int("num_chunks", num_chunks, minimum=1)
    n_u = 3 * m * _UNIT_ROUNDOFF
    if not n_u < 0.5:
        raise ParameterError(f"num_chunks = {m} is too large for float64 summation bounds")
    gamma = n_u / (1.0 - n_u)
    return m * (6.0 * _UNIT_ROUNDOFF + 2.0 * gamma * gamma)


def max_clipped_sum_norm(l2_clip_norm: float, *, num_rows: int, dim: int) -> float:
    """The largest L2 norm that the float64 sum of ``num_rows`` rows of length ``dim``, each
    clipped to ``l2_clip_norm`` (:mod:`dpmtv.privacy.clip`), can show when its norm is computed
    in float64 — the check of a partial sum that another process computed.

    Exactly, ``‖Σ_i â_i‖ <= Σ_i ‖â_i‖ <= n·C`` (triangle inequality). In floating point, with
    ``u = 2⁻⁵³`` and ``γ_k = k·u/(1 − k·u)`` (Higham, *Accuracy and Stability*, §3-4):

    * a stored clipped row has exact norm ``<= C·(1 + γ_{D+2})``: a clipped row is scaled to
      ``C·(1 − 2⁻⁴⁰)``, an unclipped one had a computed norm ``<= C``, and a computed norm of
      ``D`` terms is within ``γ_{D+2}`` relative of the exact one;
    * a sum of ``n`` rows is off, per coordinate, by at most ``γ_{n−1}·Σ_i |â_i|`` (added one
      after another; the accumulator's exact batch sums and compensated merges do better), so
      in norm by ``γ_{n−1}·Σ_i ‖â_i‖``;
    * the checking norm is again within ``γ_{D+2}`` relative.

    So the computed norm is ``<= n·C·(1 + γ_{D+2})²·(1 + γ_{n−1})``, which for
    ``(n + D)·u <= 10⁻³`` is below ``n·C·(1 + 4·(n + D + 2)·u)``, the bound returned (the 4
    covers the three first-order terms ``2(D + 2) + (n − 1)`` and their products).
    """
    n, d = check_int("num_rows", num_rows, minimum=0), check_int("dim", dim, minimum=1)
    return n * float(l2_clip_norm) * (1.0 + 4.0 * (n + d + 2) * _UNIT_ROUNDOFF)


class UnnoisedMean:
    """Per-layer float64 mean of the clipped chunk vectors, before noise.

    Only shapes are public. The values are read once, by the release functions, which mark the
    object ``consumed`` and drop its reference to them. Pickling and copying raise
    :class:`~dpmtv.errors.DangerousModeError`.
    """

    __slots__ = ("_values", "_num_chunks", "_layer_dims", "_consumed")

    def __init__(self, values: Mapping[int, np.ndarray], *, num_chunks: int) -> None:
        self._values = {layer: np.asarray(values[layer], np.float64) for layer in sorted(values)}
        self._num_chunks = num_chunks
        self._layer_dims = {layer: int(v.shape[0]) for layer, v in self._values.items()}
        self._consumed = False

    @property
    def layer_dims(self) -> dict[int, int]:
        """Layer -> vector length ``D_l`` (public)."""
        return dict(self._layer_dims)

    @property
    def num_chunks(self) -> int:
        """The public ``m`` the sums were divided by."""
        return self._num_chunks

    @property
    def consumed(self) -> bool:
        """True once a release has read (and dropped) the values."""
        return self._consumed

    def _consume(self) -> dict[int, np.ndarray]:
        """Hand the values to a release function exactly once; for ``privacy.release`` only."""
        if self._consumed:
            raise NoiseAlreadyAddedError(
                "this un-noised mean was already released; a release can be noised only once"
            )
        values, self._values, self._consumed = self._values, {}, True
        return values

    def __repr__(self) -> str:
        shapes = {layer: (dim,) for layer, dim in self._layer_dims.items()}
        return f"UnnoisedMean(shapes={shapes}, num_chunks={self._num_chunks}, consumed={self._consumed})"

    def __reduce_ex__(self, protocol: object) -> NoReturn:
        raise DangerousModeError(f"cannot pickle an UnnoisedMean: {_NEVER_LEAVES}")

    def __reduce__(self) -> NoReturn:
        raise DangerousModeError(f"cannot pickle an UnnoisedMean: {_NEVER_LEAVES}")

    def __copy__(self) -> UnnoisedMean:
        raise DangerousModeError(f"cannot copy an UnnoisedMean: {_NEVER_LEAVES}")

    def __deepcopy__(self, memo: object) -> UnnoisedMean:
        raise DangerousModeError(f"cannot copy an UnnoisedMean: {_NEVER_LEAVES}")


class ClippedSumAccumulator:
    """Running per-layer sums of clipped chunk vectors, constant memory in ``N``.

    The accumulator is picklable on purpose: it is what a distributed worker returns to the
    driver, which :meth:`merge`-s the workers' sums and adds noise once. It holds un-noised
    sums, so never write it to disk; its ``repr`` shows only shapes and the row count.
    """

    def __init__(self, layer_dims: Mapping[int, int]) -> None:
        if not layer_dims:
            raise ParameterError("layer_dims must name at least one layer")
        self._sums = {
            layer: np.zeros(check_int(f"layer {layer} dimension", layer_dims[layer], minimum=1))
            for layer in sorted(layer_dims)
        }  # layer -> (D_l,) float64, the running sum of the compensated summation
        self._compensation = {layer: np.zeros_like(total) for layer, total in self._sums.items()}
        self._num_rows = 0
        self._finalised = False

    @classmethod
    def of(cls, clipped: Mapping[int, np.ndarray]) -> ClippedSumAccumulator:
        """An accumulator holding the sums of one batch of clipped rows, layer -> ``(B, D_l)``."""
        accumulator = cls({layer: int(np.shape(rows)[1]) for layer, rows in clipped.items()})
        accumulator.add(clipped)
        return accumulator

    @property
    def num_rows(self) -> int:
        """How many chunk rows were added (data-dependent under add-remove: never divide by it)."""
        return self._num_rows

    @property
    def layer_dims(self) -> dict[int, int]:
        """Layer -> vector length ``D_l``."""
        return {layer: int(s.shape[0]) for layer, s in self._sums.items()}

    def add(self, clipped: Mapping[int, np.ndarray]) -> None:
        """Add a batch of clipped rows: layer -> ``(B, D_l)``, the same ``B`` for every layer."""
        self._check_open()
        batch = self._check_batch(clipped)
        if batch == 0:
            return  # adds nothing (and no summand to the rounding bound)
        for layer, rows in clipped.items():
            columns = np.asarray(rows, np.float64).T  # (D_l, B)
            self._add_exactly_rounded(layer, np.array([math.fsum(column) for column in columns]))
        self._num_rows += batch

    def merge(self, other: ClippedSumAccumulator) -> None:
        """Add another accumulator's sums and row count (e.g. a worker's) to this one."""
        self._check_open()
        other._check_open()
        if other.layer_dims != self.layer_dims:
            raise ParameterError(
                f"cannot merge accumulators with layer dims {other.layer_dims} into {self.layer_dims}"
            )
        if other._num_rows == 0:
            return  # zero sums: nothing to add (and no summand to the rounding bound)
        for layer, total in other._sums.items():
            self._add_exactly_rounded(layer, total)
            self._add_exactly_rounded(layer, other._compensation[layer])
        self._num_rows += other._num_rows

    def layers_above(self, bounds: Mapping[int, float]) -> list[int]:
        """The layers whose sum's L2 norm exceeds ``bounds[layer]`` (for checking a worker's
        partial sum against :func:`max_clipped_sum_norm`; the norms themselves are not given)."""
        self._check_open()
        return [
            layer
            for layer, total in self._sums.items()
            if not np.linalg.norm(total + self._compensation[layer]) <= bounds[layer]
        ]

    def mean(self, *, num_chunks: int) -> UnnoisedMean:
        """Divide the sums by the PUBLIC number of chunks ``m`` and finalise the accumulator.

        The divisor is ``m`` (times ``1 + κ``, :func:`summation_slack`, so that rounding stays
        inside the sensitivity), never :attr:`num_rows`: under add-remove-one the number of non-empty
        chunks depends on the data, while empty chunks contribute the zero vector and ``m`` is a
        fixed public parameter. Dividing by a data-dependent count would change the sensitivity
        analysis (and leak the count). The mean can be taken once; the sums are then dropped.

        Raises:
            ParameterError: ``num_chunks < 1`` or fewer than the rows added.
        """
        self._check_open()
        num_chunks = check_int("num_chunks", num_chunks, minimum=1)
        if self._num_rows > num_chunks:
            raise ParameterError(
                f"{self._num_rows} chunk rows were added but num_chunks is {num_chunks}; "
                "each chunk contributes at most one row"
            )
        divisor = num_chunks * (1.0 + summation_slack(num_chunks))
        values = {layer: (total + self._compensation[layer]) / divisor for layer, total in self._sums.items()}
        self._sums, self._compensation, self._finalised = {}, {}, True
        return UnnoisedMean(values, num_chunks=num_chunks)

    def __repr__(self) -> str:
        return f"ClippedSumAccumulator(layer_dims={self.layer_dims}, num_rows={self._num_rows})"

    def _add_exactly_rounded(self, layer: int, values: np.ndarray) -> None:
        """One summand into the compensated sum: TwoSum (Knuth) splits ``total + values`` into its
        rounded sum and the exact rounding error, which the compensation collects."""
        total = self._sums[layer]
        rounded = total + values
        virtual = rounded - total
        error = (total - (rounded - virtual)) + (values - virtual)  # exact: total + values = rounded + error
        self._sums[layer] = rounded
        self._compensation[layer] = self._compensation[layer] + error

    def _check_open(self) -> None:
        if self._finalised:
            raise NoiseAlreadyAddedError("this accumulator's mean was already taken; build a new accumulator")

    def _check_batch(self, clipped: Mapping[int, np.ndarray]) -> int:
        if set(clipped) != set(self._sums):
            raise ParameterError(f"expected layers {sorted(self._sums)}, got {sorted(clipped)}")
        sizes: set[int] = set()
        for layer, rows in clipped.items():
            rows = np.asarray(rows)
            expected = self._sums[layer].shape[0]
            if rows.ndim != 2 or rows.shape[1] != expected:
                raise ParameterError(f"layer {layer}: expected shape (B, {expected}), got {rows.shape}")
            if not np.isfinite(rows).all():
                raise NumericalError(f"layer {layer}: clipped rows contain NaN or inf")
            sizes.add(rows.shape[0])
        if len(sizes) != 1:
            raise ParameterError(f"every layer must have the same number of rows, got {sizes}")
        return sizes.pop()
