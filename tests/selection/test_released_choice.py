"""The candidate choice on the release (``--selection-utility released-probability``, issue 28):
where each record's terms land (one record moves every total by at most 1), what the build
releases (the pool's release, cut to the chosen heads), its accounting and its refusals."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest
import torch
from dp_accounting.dp_event import DiscreteLaplaceDpEvent, GaussianDpEvent

import dpmtv.pipeline.release as release_module
from dpmtv.artifact.vector import load_task_vector
from dpmtv.data import load_records
from dpmtv.data.records import Record
from dpmtv.errors import ParameterError
from dpmtv.heads import HeadSet
from dpmtv.pipeline.build import BuildSettings, build_task_vector
from dpmtv.pipeline.settings import PrivateClipSettings, PrivateSelectionSettings
from dpmtv.privacy import PrivacyUnit, epsilon_of, event_from_json
from dpmtv.privacy.release import calibrated_noise_std
from dpmtv.privacy.sensitivity import l2_sensitivity
from dpmtv.selection.candidates import CandidateUtilities, candidate_head_sets
from dpmtv.selection.released import pool_values, record_utilities

SELECTION = PrivateSelectionSettings(
    k=1,
    method="candidates",
    candidates="layer-groups",
    utility="released-probability",
    selection_fraction=0.1,
)
SETTINGS = BuildSettings(
    epsilon=1.0,
    delta=1e-5,
    l2_clip_norm=(0.05,),
    shots_per_chunk=4,
    progress=False,
    private_selection=SELECTION,
)


def _pool(loaded) -> HeadSet:
    g = loaded.adapter.geometry
    return HeadSet.of((layer, head) for layer in range(g.num_layers) for head in range(g.num_heads))


def _rows(loaded, seed: int = 0) -> np.ndarray:
    g = loaded.adapter.geometry
    rng = np.random.default_rng(seed)
    return rng.normal(0.0, 2.0, (g.num_layers * g.num_heads, g.head_dim))


def _canary(record: Record, tmp_path) -> Record:
    from PIL import Image

    path = tmp_path / "canary.png"
    Image.new("RGB", (20, 20), (250, 10, 10)).save(path)
    return replace(record, images=(str(path),), answer="a canary answer")


def test_one_record_changes_only_its_own_terms_and_every_total_by_at_most_one(
    tiny_llava, records_file, tmp_path
):
    records = load_records(records_file)[:12]
    pool = _pool(tiny_llava)
    candidates = candidate_head_sets("layer-groups", pool)
    values = pool_values(_rows(tiny_llava), pool, tiny_llava.adapter)
    base = record_utilities(tiny_llava.adapter, records, values, candidates)
    assert base.shape == (12, len(candidates)) and np.all((base >= 0) & (base <= 1))
    assert np.ptp(base, axis=1).max() > 1e-3  # the candidates are told apart at all
    for i in (0, 5, 11):
        replaced = [*records[:i], _canary(records[i], tmp_path), *records[i + 1 :]]
        utilities = record_utilities(tiny_llava.adapter, replaced, values, candidates)
        others = np.arange(12) != i
        np.testing.assert_allclose(utilities[others], base[others], rtol=1e-5, atol=1e-7)  # scored alone
        assert np.abs(utilities.sum(0) - base.sum(0)).max() <= 1 + 1e-9  # replace-one
        removed = np.delete(base, i, axis=0)  # add-remove-one: one term fewer
        assert np.abs(removed.sum(0) - base.sum(0)).max() <= 1 + 1e-9


def test_a_record_that_cannot_be_scored_adds_zero(tiny_llava, records_file, tmp_path):
    records = load_records(records_file)[:5]
    broken = replace(records[2], images=(str(tmp_path / "missing.png"),))
    pool = _pool(tiny_llava)
    candidates = candidate_head_sets("layer-blocks", pool)
    values = pool_values(_rows(tiny_llava), pool, tiny_llava.adapter)
    whole = record_utilities(tiny_llava.adapter, records, values, candidates)
    scored = record_utilities(tiny_llava.adapter, [*records[:2], broken, *records[3:]], values, candidates)
    assert np.all(scored[2] == 0)
    np.testing.assert_allclose(
        np.delete(scored, 2, axis=0), np.delete(whole, 2, axis=0), rtol=1e-5, atol=1e-7
    )


def test_the_build_releases_the_pool_and_keeps_the_chosen_heads_part(tiny_llava, records_file, monkeypatch):
    seen = {}
    real = release_module.select_on_release

    def spy(loaded, records, pool, rows, **kwargs):
        seen["pool"], seen["rows"] = pool, rows.copy()
        return real(loaded, records, pool, rows, **kwargs)

    monkeypatch.setattr(release_module, "select_on_release", spy)
    records = load_records(records_file)
    seeded = replace(SETTINGS, insecure_seed=7, allow_insecure_seed=True)
    vector = build_task_vector(tiny_llava, records, None, seeded).vector
    pool = seen["pool"]
    assert pool == _pool(tiny_llava)
    kept = [pool.pairs.index(pair) for pair in vector.heads.pairs]
    np.testing.assert_array_equal(vector.values, seen["rows"][kept].astype(np.float32))
    selection, p = vector.metadata.head_selection, vector.metadata.privacy
    details = selection["details"]
    assert selection["method"] == "private-candidate-choice" and details["utility"] == "released-probability"
    assert details["candidates"][details["chosen"]] == [list(pair) for pair in vector.heads.pairs]
    # Δ over every pool layer (what was released), the EM's event composed with the Gaussian
    m = len(records) // 4
    pool_delta = l2_sensitivity(l2_clip_norms=[0.05] * len(pool.layers), num_chunks=m, relation="replace-one")
    assert p.l2_sensitivity == pytest.approx(pool_delta, rel=1e-12)
    event = event_from_json(p.accounting_events)
    assert event.events[0] == DiscreteLaplaceDpEvent(0.1, 1)
    assert isinstance(event.events[-1], GaussianDpEvent)
    assert epsilon_of(event, delta=1e-5) <= 1.0 + 1e-9


def test_a_private_only_build_with_a_private_clip_norm_loads_and_accounts_three_rounds(
    tiny_llava, records_file, tmp_path
):
    settings = replace(SETTINGS, l2_clip_norm=(1.0,), private_clip=PrivateClipSettings(epsilon_fraction=0.2))
    out = tmp_path / "v.safetensors"
    build_task_vector(tiny_llava, load_records(records_file), None, settings, out=out)
    metadata = load_task_vector(out).metadata  # the load re-derives the whole claim
    p = metadata.privacy
    event = event_from_json(p.accounting_events)
    assert [type(e).__name__ for e in event.events] == [
        "DiscreteLaplaceDpEvent", "DiscreteLaplaceDpEvent", "GaussianDpEvent",
    ]  # fmt: skip
    layers = sorted({layer for layer, _ in metadata.heads})
    assert len(p.l2_clip_norm) == len(layers) == len(p.clip_norm_selection["layer_scales"])
    assert len(p.sensitivity_l2_clip_norm) == tiny_llava.adapter.geometry.num_layers  # the pool's
    multiplier = p.clip_norm_selection["multiplier"]
    assert all(
        math.isclose(c, multiplier * g, rel_tol=1e-12)
        for c, g in zip(p.l2_clip_norm, p.clip_norm_selection["layer_scales"], strict=True)
    )
    fixed = event.events[:-1]
    expected = calibrated_noise_std(
        l2_sensitivity=p.l2_sensitivity, epsilon=1.0, delta=1e-5, sampler=_opendp(), fixed_events=fixed
    )
    assert p.noise_std == pytest.approx(expected, rel=1e-6)


def _opendp():
    from dpmtv.privacy.noise import OpenDPGaussianSampler

    return OpenDPGaussianSampler()


def test_refusals():
    with pytest.raises(ParameterError, match="sequentially only"):
        replace(SELECTION, composition="parallel")
    with pytest.raises(ParameterError, match="record only"):
        BuildSettings(
            epsilon=1.0, delta=1e-5, l2_clip_norm=(1.0,), shots_per_chunk=4, privacy_unit=PrivacyUnit.USER,
            num_chunks=4, max_records_per_user=2, private_selection=SELECTION,
        )  # fmt: skip
    task = CandidateUtilities(
        candidates=(), utility="released-probability", max_prompt_tokens=None, shots_per_chunk=4
    )
    with pytest.raises(ParameterError, match="scored on the release, not per chunk"):
        task.run(None, [], None, progress=False)


def test_pool_values_puts_each_row_at_its_head(tiny_llava):
    pool = HeadSet.of([(0, 1), (1, 0)])
    g = tiny_llava.adapter.geometry
    rows = np.arange(2 * g.head_dim, dtype=np.float64).reshape(2, -1)
    values = pool_values(rows, pool, tiny_llava.adapter)
    assert values.shape == (g.num_layers, g.num_heads, g.head_dim)
    assert torch.equal(values[0, 1], torch.from_numpy(rows[0]).float())
    assert torch.equal(values[1, 0], torch.from_numpy(rows[1]).float())
    assert float(values.abs().sum()) == pytest.approx(float(np.abs(rows).sum()))
