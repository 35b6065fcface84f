"""The embedded generator: deterministic by seed, tasks consistent with the image attributes."""

from __future__ import annotations

import numpy as np
import pytest

from dpmtv.embedded import episodes
from dpmtv.embedded import generator as gen


def test_task_suite_marks_seen_and_held_out_predicates():
    tasks = gen.task_suite()
    names = [t.name for t in tasks]
    assert len(set(names)) == len(names)
    assert sum(t.kind == "naming" for t in tasks) == 4
    held = [t for t in tasks if t.held_out]
    assert sorted(t.name for t in held) == sorted(gen.HELD_OUT_TASKS) and len(held) >= 8
    assert all(t.is_predicate for t in held)
    assert {t.kind for t in held} >= {"predicate", "conjunction", "disjunction"}
    assert any("not_" in t.name for t in held)  # a composition with a negated literal
    assert len({t.question for t in tasks}) == 1
    maps = [t for t in gen.task_suite(label_maps=True) if t.kind == "label_map"]
    assert maps and all(t.held_out and set(t.answers) <= set(gen.NONCE_WORDS) for t in maps)


def test_no_trained_task_has_a_held_out_truth_table_or_its_complement():
    forbidden = set()
    for name in gen.HELD_OUT_TASKS:
        truth = gen.get_task(name).truth
        forbidden |= {truth.tobytes(), (~truth).tobytes()}
    trained = [t for t in gen.training_tasks() if t.is_predicate]
    assert len(trained) > 200
    assert not [t.name for t in trained if t.truth.tobytes() in forbidden]
    assert gen.get_task("is_not_green").held_out  # the complement of is_green
    assert gen.get_task("not_green_or_not_cross").held_out  # ... of green_and_cross


@pytest.mark.parametrize(
    ("name", "attributes", "answer"),
    [
        ("green_and_cross", ("green", "cross", "big", "left"), "yes"),
        ("green_and_cross", ("green", "circle", "big", "left"), "no"),
        ("yellow_or_square", ("red", "square", "small", "right"), "yes"),
        ("yellow_or_square", ("red", "circle", "small", "right"), "no"),
        ("red_and_not_circle", ("red", "cross", "small", "left"), "yes"),
        ("red_and_not_circle", ("red", "circle", "small", "left"), "no"),
        ("is_not_yellow", ("yellow", "cross", "small", "left"), "no"),
        ("name_shape", ("yellow", "cross", "small", "left"), "cross"),
    ],
)
def test_compositional_answers(name, attributes, answer):
    assert gen.get_task(name).answer(dict(zip(gen.ATTRIBUTES, attributes))) == answer


def test_records_are_deterministic_by_seed():
    task = gen.get_task("is_red")
    a = gen.sample_records(task, 12, np.random.default_rng(7))
    b = gen.sample_records(task, 12, np.random.default_rng(7))
    c = gen.sample_records(task, 12, np.random.default_rng(8))
    assert a.answers == b.answers and a.attributes == b.attributes
    assert all(np.array_equal(np.asarray(x), np.asarray(y)) for x, y in zip(a.images, b.images))
    assert not all(np.array_equal(np.asarray(x), np.asarray(y)) for x, y in zip(a.images, c.images))


def test_episodes_are_deterministic_by_seed():
    a = episodes.sample_episodes(np.random.default_rng(3), 4, 16)
    b = episodes.sample_episodes(np.random.default_rng(3), 4, 16)
    assert np.array_equal(a.images, b.images) and np.array_equal(a.answers, b.answers)
    assert a.task_names == b.task_names
    assert a.images.shape == (64, 24, 24, 3) and a.images.dtype == np.uint8


@pytest.mark.parametrize("task", gen.task_suite(label_maps=True), ids=lambda t: t.name)
def test_answers_follow_the_attributes(task):
    records = gen.sample_records(task, 64, np.random.default_rng(0))
    assert len(records) == 64
    assert all(im.size == (24, 24) and im.mode == "RGB" for im in records.images)
    for attributes, answer in zip(records.attributes, records.answers):
        assert task.answer(attributes) == answer
        assert answer in task.answers
    if task.is_predicate:  # label-balanced whatever the share of positive combinations
        assert 16 <= records.answers.count("yes") <= 48


def test_training_episodes_follow_the_mix_and_exclude_held_out_tasks():
    batch = episodes.sample_episodes(np.random.default_rng(1), 400, 16)
    held = {t.name for t in gen.all_tasks() if t.held_out}
    assert not set(batch.task_names) & held
    kinds = np.array(batch.kinds)
    for group, share in episodes.TRAINING_MIX.items():
        # binomial(400, share): 5 standard deviations, false-failure rate < 1e-6 per group
        assert abs(np.mean(kinds == group) - share) < 5 * np.sqrt(share * (1 - share) / 400)
    maps = [n for n, k in zip(batch.task_names, batch.kinds) if k == "label_map"]
    assert len(set(maps)) > 0.9 * len(maps)  # a fresh map (almost) every episode
    for answers, kind in zip(batch.answers, batch.kinds):
        if kind == "label_map":
            assert all(gen.ANSWER_WORDS[i] in gen.NONCE_WORDS for i in answers)


def test_rendered_colour_matches_the_colour_attribute():
    rng = np.random.default_rng(0)
    codes = gen.sample_attributes(rng, 200)
    codes[:, 2] = 1  # big shapes: plenty of foreground pixels
    images = gen.render(codes, rng).astype(float)
    brightest = images.reshape(200, -1, 3)
    fg = brightest[np.arange(200), brightest.sum(-1).argmax(1)]  # brightest pixel ~ shape colour
    for (colour, *_), pixel in zip(codes, fg):
        if colour < 3:  # red, green, blue: that channel dominates
            assert pixel.argmax() == colour
        else:  # yellow: red and green high, blue low
            assert pixel[2] < min(pixel[0], pixel[1])


def test_bursty_label_maps_draw_their_shots_from_a_few_combinations():
    rng = np.random.default_rng(3)
    batch = episodes.sample_episodes(rng, 40, 32, mix={"label_map": 1.0}, bursty_label_maps=1.0)
    combos = [len(np.unique(codes, axis=0)) for codes in batch.codes]
    assert max(combos) <= max(episodes.BURSTY_POOL_SIZES)
    plain = episodes.sample_episodes(np.random.default_rng(3), 40, 32, mix={"label_map": 1.0})
    assert np.mean([len(np.unique(c, axis=0)) for c in plain.codes]) > 2 * max(episodes.BURSTY_POOL_SIZES)


def test_no_bursty_episodes_replay_the_stream_of_earlier_runs():
    """Share 0 draws nothing extra: the episodes equal those of a call without the option."""
    a = episodes.sample_episodes(np.random.default_rng(5), 12, 16)
    b = episodes.sample_episodes(np.random.default_rng(5), 12, 16, bursty_label_maps=0.0)
    c = episodes.sample_episodes(np.random.default_rng(5), 12, 16, bursty_label_maps=0.5)
    assert np.array_equal(a.images, b.images) and np.array_equal(a.answers, b.answers)
    assert not np.array_equal(a.codes, c.codes)


def test_random_tables_are_coins_outside_the_rule_grammar():
    from dpmtv.embedded import rulespace

    batch = episodes.sample_episodes(np.random.default_rng(7), 60, 48, mix={"random_table": 1.0})
    assert set(batch.kinds) == {"random_table"}
    tables = []
    for codes, answers in zip(batch.codes, batch.answers, strict=True):
        rows = gen.combo_index(codes)
        for row in np.unique(rows):  # one answer per combination within an episode: a table
            assert len(set(answers[rows == row].tolist())) == 1
        tables.append(tuple(sorted({int(r): int(a) for r, a in zip(rows, answers, strict=True)}.items())))
    assert len(set(tables)) == len(tables)  # a fresh table each episode
    # draws that land on a grammar table (here, the first three rules') are drawn again
    grammar = [rulespace.table_of(e.rule) for e in rulespace.rule_entries()[:3]]
    coins = np.random.default_rng(0).uniform(size=64) < 0.5
    draws = iter([*grammar, coins])

    class Rigged:  # uniform() < 0.5 gives back each table in turn
        def uniform(self, size=None):
            return np.where(next(draws), 0.0, 1.0)

    task = episodes.random_table(Rigged())
    assert all(rulespace.in_grammar(t) for t in grammar)
    assert np.array_equal(task.truth, coins) and not rulespace.in_grammar(coins)
