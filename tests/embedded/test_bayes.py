"""The Bayes-optimal reference learners: their hypothesis sets against the public hold-out rule,
their answers against a brute-force posterior, and the benchmark's references against the very
records ICL shows."""

from __future__ import annotations

import numpy as np
import pytest

from dpmtv.demo.recognition import run_ceiling
from dpmtv.embedded import bayes
from dpmtv.embedded import generator as gen
from dpmtv.embedded.rulespace import trained_tables
from dpmtv.embedded.suite import SPLITS, _task_index
from dpmtv.embedded.world import ATTRIBUTES, VALUES, combo_index
from dpmtv.eval.benchmarks.embedded import embedded_benchmark
from dpmtv.eval.methods import icl_demonstrations


def _keys(tables: np.ndarray) -> set[bytes]:
    return {t.tobytes() for t in tables}


def test_the_hypothesis_sets_follow_the_public_hold_out_rule():
    recogniser, shapes, grammar = (_keys(bayes.hypotheses(learner)) for learner in bayes.LEARNERS)
    assert recogniser == _keys(trained_tables()) | _keys(~trained_tables())
    assert recogniser < shapes < grammar
    for name in gen.HELD_OUT_TASKS:  # every held-out task is in the grammar, never a trained table
        task = gen.get_task(name)
        key = task.truth.tobytes()
        assert key in grammar and key not in recogniser
        never_drawn_shape = task.kind in ("parity3", "and_or")
        assert (key in shapes) is not never_drawn_shape  # hash- and legacy-held tables of trained shapes


def _brute_force_yes_share(tables: np.ndarray, rows, answers, query: int) -> float:
    """Uniform prior, noiseless likelihood; with no consistent table, the fewest disagreements."""
    fewest = min(sum(bool(t[r]) != bool(a) for r, a in zip(rows, answers, strict=True)) for t in tables)
    kept = [
        t for t in tables if sum(bool(t[r]) != bool(a) for r, a in zip(rows, answers, strict=True)) == fewest
    ]
    return sum(bool(t[query]) for t in kept) / len(kept)


@pytest.mark.parametrize("learner", bayes.LEARNERS)
def test_posterior_matches_brute_force(learner):
    rng = np.random.default_rng(7)
    tables = bayes.hypotheses(learner)
    task = gen.get_task("2_of_red_circle_big")  # held out: the recogniser has no consistent table late
    demo_rows = rng.integers(0, 64, size=(6, 40))
    query_rows = rng.integers(0, 64, size=6)
    shares = bayes.yes_share(learner, demo_rows, task.truth[demo_rows], query_rows)
    expected = [
        _brute_force_yes_share(tables, rows, task.truth[rows], q)
        for rows, q in zip(demo_rows, query_rows, strict=True)
    ]
    np.testing.assert_allclose(shares, expected, rtol=0, atol=1e-12)
    if learner == bayes.RECOGNISER:  # the draw reaches the fallback: no trained table agrees
        disagreements = [(tables[:, rows] != task.truth[rows]).sum(1).min() for rows in demo_rows]
        assert max(disagreements) > 0


def test_every_cell_shown_identifies_the_table_of_a_learner_that_holds_it():
    every_cell = np.arange(64)[None, :].repeat(64, 0)
    for task, learners in (
        (gen.get_task("green_and_left_or_circle"), (bayes.GRAMMAR,)),
        (gen.get_task("2_of_red_circle_big"), (bayes.SHAPES, bayes.GRAMMAR)),
        (gen.get_task("red_xor_big"), bayes.LEARNERS),
    ):
        for learner in learners:
            shares = bayes.yes_share(learner, every_cell, task.truth[every_cell], np.arange(64))
            assert np.array_equal(shares, task.truth.astype(float))  # one table left: itself


def test_a_tie_scores_one_half():
    """No demonstrations: every table and its complement are both kept, every query is a tie."""
    empty = np.zeros((3, 0), dtype=np.int64)
    truth = gen.get_task("is_red").truth
    scores = bayes.correct(bayes.GRAMMAR, empty, truth[empty], np.arange(3), truth[:3])
    assert (scores == 0.5).all()


def test_the_references_see_the_records_icl_shows():
    """The learners' demonstrations are the records ``icl:16`` puts in each prompt (the
    benchmark's private records at the same draw), read back from the generator's own record
    attributes, so the references equal a learner fed from the records themselves."""
    task, seed, num_train, num_test, shots = gen.get_task("big_and_left"), 3, 128, 16, 16
    ceiling = run_ceiling(task, (seed,), num_test)
    benchmark = embedded_benchmark(task, seed=seed, num_train=num_train, num_test=num_test, ceiling=ceiling)
    picks = icl_demonstrations(num_train, num_test, shots, seed)
    references = benchmark.demonstration_facts(picks, benchmark.test)["demonstration_references"]
    train, test = _generated(task, num_train, seed, "private"), _generated(task, num_test, seed, "test")
    assert [r.answer for r in benchmark.train] == train.answers  # the same records ICL draws from
    assert np.array_equal(np.asarray(benchmark.test[0].images[0]), np.asarray(test.images[0]))
    train_rows, test_rows = _rows(train), _rows(test)
    yes = np.array(train.answers) == gen.YES
    for learner in bayes.LEARNERS:
        shares = bayes.yes_share(learner, np.stack([train_rows[p] for p in picks]),
                                 np.stack([yes[p] for p in picks]), test_rows)  # fmt: skip
        truth = np.array(test.answers) == gen.YES
        expected = np.where(shares == 0.5, 0.5, ((shares > 0.5) == truth).astype(float))
        assert references[learner]["accuracy"] == pytest.approx(expected.mean(), abs=1e-12)
        assert references[learner]["deciding_count"] == len(benchmark.scorer.deciding_ids)
    later = benchmark.demonstration_facts(picks[8:], benchmark.test[8:])["demonstration_references"]
    assert later[bayes.GRAMMAR]["deciding_count"] == sum(
        r.record_id in benchmark.scorer.deciding_ids for r in benchmark.test[8:]
    )  # queries are matched by record id: a shorter test list (the shot curve's) is scored right


def _generated(task, n: int, seed: int, split: str) -> gen.Records:
    return gen.sample_records(task, n, np.random.default_rng([seed, _task_index(task), SPLITS[split]]))


def _rows(records: gen.Records) -> np.ndarray:
    codes = [[VALUES[a].index(attrs[a]) for a in ATTRIBUTES] for attrs in records.attributes]
    return combo_index(np.array(codes))
