"""The audit with a real (tiny, random-weight) model: forward passes once, canary by measurement."""

from __future__ import annotations

import numpy as np
import pytest

import dpmtv.forward.extract as extract_module
from dpmtv.audit import MECHANISMS
from dpmtv.audit.model import audit_model, model_chunk_vectors
from dpmtv.data import load_records
from dpmtv.errors import ParameterError
from dpmtv.heads import parse_head_spec
from tests.conftest import write_records


@pytest.fixture(scope="module")
def canary_setup(tiny_llava, tmp_path_factory):
    records = load_records(write_records(tmp_path_factory.mktemp("audit-data"), 9))
    heads = parse_head_spec("layers:0", tiny_llava.adapter.geometry)
    clip = {0: 1e-3}  # far below the activations' norms: every chunk vector is clipped
    calls = []
    real = extract_module.extract_selected_heads  # what stack_selected_heads runs per batch

    def counting(adapter, prompts, heads):
        calls.append(len(prompts))
        return real(adapter, prompts, heads)

    extract_module.extract_selected_heads = counting
    try:
        canary = model_chunk_vectors(
            tiny_llava, records, heads, l2_clip_norms=clip, shots_per_chunk=3, seed=0
        )
    finally:
        extract_module.extract_selected_heads = real
    return canary, clip, sum(calls)


def test_forward_passes_once_and_canary_is_measured(canary_setup, tiny_llava):
    canary, clip, passes = canary_setup
    # m chunks + (3 candidate chunks × 3 positions × 4 images)
    assert canary.num_chunks == 3 and passes == 3 + 3 * 3 * 4
    dim = tiny_llava.adapter.geometry.head_dim * tiny_llava.adapter.geometry.num_heads
    assert canary.rows_without[0].shape == canary.rows_with[0].shape == (3, dim)
    others = [j for j in range(3) if j != canary.chunk]
    assert np.array_equal(canary.rows_without[0][others], canary.rows_with[0][others])  # one chunk differs
    assert not np.array_equal(canary.rows_without[0][canary.chunk], canary.rows_with[0][canary.chunk])
    assert 0.0 < canary.shift_fraction <= 1.0
    assert canary.position in {"first-record", "record-1", "last-record"}
    assert canary.describe()["chunk"] == canary.chunk


def test_canary_power_catches_a_small_sigma_and_not_the_correct_one(canary_setup):
    """Seeded; 3 repetitions at 2000 trials. At σ × 1 each repetition is flagged with probability
    <= 5% (the CP argument); at σ × 0.02 the canary's shift dwarfs the noise."""
    from dpmtv.audit.model import canary_power

    canary, clip, _ = canary_setup
    power = canary_power(
        canary,
        l2_clip_norms=clip,
        epsilon=1.0,
        delta=1e-5,
        confidence=0.95,
        trials=2000,
        fractions=(1.0, 0.02),
        repetitions=3,
        seed=5,
    )
    assert power["flag_rate_by_sigma_fraction"]["0.02"] == 1.0
    assert power["flag_rate_by_sigma_fraction"]["1"] == 0.0
    assert power["largest_fraction_flagged"] == 0.02


def test_model_audit_correct_and_no_clip(canary_setup):
    """Seeded; the correct release is flagged with probability <= 5% (the CP argument). Without
    clipping the unclipped chunk vectors move by far more than Δ (C is 1e-3), so it is flagged."""
    canary, clip, _ = canary_setup
    (correct,) = audit_model(canary, l2_clip_norms=clip, epsilons=[2.0], delta=1e-5, trials=400, seed=1)
    assert not correct.violation
    assert correct.shift_norm == pytest.approx(canary.shift_fraction * correct.l2_sensitivity, rel=1e-6)
    (broken,) = audit_model(
        canary,
        l2_clip_norms=clip,
        epsilons=[2.0],
        delta=1e-5,
        trials=400,
        mechanism=MECHANISMS["no-clip"],
        seed=1,
    )
    assert broken.violation and broken.shift_norm > 10 * broken.l2_sensitivity


def test_too_few_records(tiny_llava, tmp_path):
    records = load_records(write_records(tmp_path, 2))
    heads = parse_head_spec("layers:0", tiny_llava.adapter.geometry)
    with pytest.raises(ParameterError, match="shots_per_chunk"):
        model_chunk_vectors(tiny_llava, records, heads, l2_clip_norms={0: 1.0}, shots_per_chunk=3)
