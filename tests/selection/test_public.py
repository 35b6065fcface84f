"""Public head selection on a tiny model with a PLANTED set of answer-carrying heads."""

from __future__ import annotations

import json

import pytest
import torch

from dpmtv.errors import HeadSpecError, ParameterError
from dpmtv.heads import HeadSet, parse_head_spec
from dpmtv.selection import (
    PublicSearch,
    SelectionResult,
    best_of,
    greedy,
    layer_block_candidates,
    refine_with_best_of,
    reinforce,
    scored,
    select_public,
)
from dpmtv.selection._search import mask_of
from tests.selection.planted import PLANTED


def _others(geometry) -> list[tuple[int, int]]:
    every = [(layer, head) for layer in range(geometry.num_layers) for head in range(geometry.num_heads)]
    return [pair for pair in every if pair not in PLANTED]


def test_planted_heads_help_alone_and_together(planted_search):
    geometry = planted_search.geometry
    rows = torch.stack(
        [torch.zeros(geometry.num_layers, geometry.num_heads), mask_of(HeadSet.of(PLANTED), geometry).float()]
    )
    logp, _ = planted_search.dev.evaluate(rows)
    assert logp[1].mean() > logp[0].mean() + 5.0  # the construction works; otherwise every test is moot


def test_reinforce_recovers_the_planted_heads(planted_search):
    result = reinforce(planted_search, steps=150, seed=0, progress=False)
    assert result.heads == HeadSet.of(PLANTED)
    probabilities = torch.tensor(result.probabilities)  # (L, H)
    assert all(probabilities[pair] > 0.9 for pair in PLANTED)
    assert all(probabilities[pair] < 0.1 for pair in _others(planted_search.geometry))
    assert result.method == "reinforce" and result.details["steps"] == 150
    assert len(result.candidates) <= 10 and result.chosen in result.candidates


def test_reinforce_is_seeded(planted_search):
    first = reinforce(planted_search, steps=5, seed=3, progress=False)
    second = reinforce(planted_search, steps=5, seed=3, progress=False)
    assert first.probabilities == second.probabilities and first.heads == second.heads


def test_reinforce_without_steps_stays_at_the_prior(planted_search):
    result = reinforce(planted_search, steps=0, seed=0, progress=False)
    prior = torch.sigmoid(torch.tensor(-1.0))
    torch.testing.assert_close(torch.tensor(result.probabilities), torch.full((2, 4), float(prior)))


@pytest.mark.parametrize(("init_logit", "bound"), [(20.0, 1 - 1e-3), (-20.0, 1e-3)])
def test_reinforce_clamps_keep_probabilities_as_mtv(planted_search, init_logit, bound):
    """MTV clamps the Bernoulli probabilities to [1e-3, 1 − 1e-3]; failed before the clamp
    (sigmoid(±20) is 1 − 2e-9 / 2e-9). A few steps never push them past the bounds."""
    for steps in (0, 3):
        result = reinforce(planted_search, steps=steps, seed=0, init_logit=init_logit, progress=False)
        probabilities = torch.tensor(result.probabilities)  # (L, H)
        assert probabilities.min() >= 1e-3 - 1e-9 and probabilities.max() <= 1 - 1e-3 + 1e-9
    torch.testing.assert_close(probabilities, torch.full((2, 4), bound))


def test_greedy_recovers_the_planted_heads_and_stops(planted_search):
    result = greedy(planted_search, progress=False)
    assert result.heads == HeadSet.of(PLANTED)
    assert {tuple(step[:2]) for step in result.scores} == set(PLANTED)
    assert all(step[2] > 0 for step in result.scores) and not result.details["no_head_helped"]


def test_greedy_respects_max_heads(planted_search):
    result = greedy(planted_search, max_heads=1, progress=False)
    assert len(result.heads) == 1 and result.heads.pairs[0] in PLANTED


@pytest.mark.parametrize("estimate", ["exact", "attribution"])
def test_scored_top_k_finds_the_planted_heads(planted_search, estimate):
    result = scored(planted_search, k=3, estimate=estimate)
    assert result.heads == HeadSet.of(PLANTED)
    assert result.method == f"scored-{estimate}" and len(result.scores) == 8


def test_attribution_agrees_in_sign_with_exact_effects(planted_search):
    exact = {tuple(s[:2]): s[2] for s in scored(planted_search, k=1).scores}
    first_order = {tuple(s[:2]): s[2] for s in scored(planted_search, k=1, estimate="attribution").scores}
    assert all((exact[h] > 0) == (first_order[h] > 0) for h in exact)


def test_pool_restricts_every_search(planted):
    loaded, task = planted
    search = PublicSearch.from_task(loaded.adapter, task, pool=HeadSet.of([(1, 0), (1, 2)]))
    assert greedy(search, progress=False).heads == HeadSet.of([(1, 2)])
    assert scored(search, k=1).heads == HeadSet.of([(1, 2)])
    assert set(reinforce(search, steps=20, progress=False).heads.pairs) <= {(1, 0), (1, 2)}


def test_best_of_keeps_the_best_candidate_on_dev(planted_search):
    candidates = {**layer_block_candidates(planted_search.geometry), "planted": HeadSet.of(PLANTED)}
    result = best_of(planted_search, candidates)
    assert result.chosen == "planted" and result.heads == HeadSet.of(PLANTED)
    assert set(result.candidates) == set(candidates)
    assert result.dev_metric == max(result.candidates.values())


def test_best_of_replaces_a_worse_search_result(planted_search):
    weak = scored(planted_search, k=1)  # one planted head only
    refined = refine_with_best_of(planted_search, weak, {"planted": HeadSet.of(PLANTED)})
    assert refined.chosen == "planted" and refined.method == "scored-exact+best-of"
    assert refined.scores == weak.scores  # the search's own outputs are kept


def test_layer_blocks_cover_every_window():
    from dpmtv.models.base import HeadGeometry

    blocks = layer_block_candidates(HeadGeometry(4, 2, 8), widths=(1, 3))
    singles = ["layers:0-0", "layers:1-1", "layers:2-2", "layers:3-3"]
    assert list(blocks) == [*singles, "layers:0-2", "layers:1-3", "all"]
    assert len(blocks["layers:1-3"]) == 6


def test_cached_and_full_forward_scores_agree(planted):
    loaded, task = planted
    cached = PublicSearch.from_task(loaded.adapter, task)
    full = PublicSearch.from_task(loaded.adapter, task, use_cache=False)
    assert cached.dev.cached and not full.dev.cached
    masks = torch.bernoulli(torch.full((6, 2, 4), 0.5), generator=torch.Generator().manual_seed(0))
    torch.testing.assert_close(cached.dev.evaluate(masks)[0], full.dev.evaluate(masks)[0], atol=1e-4, rtol=0)


def test_select_public_end_to_end_and_round_trip(planted, public_records, tmp_path):
    loaded, _ = planted
    result = select_public(loaded, public_records, method="greedy", shots=4, progress=False)
    assert result.heads == HeadSet.of(PLANTED) and result.method == "greedy+best-of"
    assert "layers:0-1" in result.candidates and result.details["kv_cache"] is True
    path = result.save(tmp_path / "sel" / "heads.json")
    assert SelectionResult.load(path) == result
    assert parse_head_spec(str(path), loaded.adapter.geometry) == result.heads
    assert json.loads(path.read_text())["heads"] == [list(p) for p in PLANTED]
    metadata = json.loads(json.dumps(result.to_metadata()))  # JSON-ready for the artifact
    assert metadata["method"] == "greedy+best-of" and "heads" not in metadata


def test_invalid_arguments_name_the_value(planted_search, tmp_path):
    with pytest.raises(ParameterError, match="k must be in"):
        scored(planted_search, k=9)
    with pytest.raises(ParameterError, match="estimate"):
        scored(planted_search, k=1, estimate="taylor")
    with pytest.raises(ParameterError, match="method"):
        select_public(None, [], method="annealing")
    (tmp_path / "x.json").write_text("{}")
    with pytest.raises(HeadSpecError, match="not a dpmtv head selection"):
        SelectionResult.load(tmp_path / "x.json")


@pytest.fixture
def recorded_bars(monkeypatch):
    """The progress bars a search opens: (module, description, total, advances)."""
    from contextlib import contextmanager

    import dpmtv.selection._greedy
    import dpmtv.selection._scored

    bars = []

    def recorder(module):
        @contextmanager
        def progress_bar(description, total, *, enabled=True):
            bar = {"module": module, "description": description, "total": total, "advances": []}
            bars.append(bar)
            yield bar["advances"].append

        return progress_bar

    monkeypatch.setattr(dpmtv.selection._greedy, "progress_bar", recorder("greedy"))
    monkeypatch.setattr(dpmtv.selection._scored, "progress_bar", recorder("scored"))
    return bars


def test_greedy_progress_moves_within_each_step(planted_search, recorded_bars):
    greedy(planted_search, max_heads=2, progress=False)
    (bar,) = recorded_bars
    queries = planted_search.train.num_queries
    assert bar["total"] == 2 * queries and queries > 1
    assert bar["advances"] == [1] * len(bar["advances"]) and len(bar["advances"]) == 2 * queries


@pytest.mark.parametrize("estimate", ["exact", "attribution"])
def test_scored_shows_progress(planted_search, recorded_bars, estimate):
    scored(planted_search, k=2, estimate=estimate, batch_size=2)
    (bar,) = recorded_bars
    assert bar["module"] == "scored" and sum(bar["advances"]) == bar["total"] == len(
        planted_search.task.train
    )
    assert len(bar["advances"]) > 1
