"""The embedded generator: deterministic by seed, tasks consistent with the image attributes."""

from __future__ import annotations

import numpy as np
import pytest

from dpmtv.embedded import generator as gen


def test_task_suite_has_16_tasks_with_two_held_out_predicates():
    tasks = gen.task_suite()
    assert len(tasks) == 16
    assert len({t.name for t in tasks}) == 16
    assert sum(t.kind == "naming" for t in tasks) == 4
    held = [t for t in tasks if t.held_out]
    assert sorted(t.name for t in held) == sorted(gen.HELD_OUT_PREDICATES)
    assert all(t.kind == "predicate" for t in held)
    assert len(gen.training_tasks()) == 14
    assert len({t.question for t in tasks}) == 1


def test_records_are_deterministic_by_seed():
    task = gen.get_task("is_red")
    a = gen.sample_records(task, 12, np.random.default_rng(7))
    b = gen.sample_records(task, 12, np.random.default_rng(7))
    c = gen.sample_records(task, 12, np.random.default_rng(8))
    assert a.answers == b.answers and a.attributes == b.attributes
    assert all(np.array_equal(np.asarray(x), np.asarray(y)) for x, y in zip(a.images, b.images))
    assert not all(np.array_equal(np.asarray(x), np.asarray(y)) for x, y in zip(a.images, c.images))


def test_episodes_are_deterministic_by_seed():
    a = gen.sample_episodes(np.random.default_rng(3), 4, 16)
    b = gen.sample_episodes(np.random.default_rng(3), 4, 16)
    assert np.array_equal(a.images, b.images) and np.array_equal(a.answers, b.answers)
    assert a.task_names == b.task_names
    assert a.images.shape == (64, 24, 24, 3) and a.images.dtype == np.uint8


@pytest.mark.parametrize("task", gen.task_suite(), ids=lambda t: t.name)
def test_answers_follow_the_attributes(task):
    records = gen.sample_records(task, 64, np.random.default_rng(0))
    assert len(records) == 64
    assert all(im.size == (24, 24) and im.mode == "RGB" for im in records.images)
    for attributes, answer in zip(records.attributes, records.answers):
        assert task.answer(attributes) == answer
        assert answer in task.answers
    if task.kind == "predicate":  # label-balanced
        assert 16 <= records.answers.count("yes") <= 48


def test_training_episodes_exclude_held_out_tasks_and_combination():
    batch = gen.sample_episodes(np.random.default_rng(1), 200, 16)
    assert not set(batch.task_names) & set(gen.HELD_OUT_PREDICATES)
    colour = gen.VALUES["colour"].index(gen.HELD_OUT_COMBO[0])
    shape = gen.VALUES["shape"].index(gen.HELD_OUT_COMBO[1])
    codes = batch.codes.reshape(-1, 4)
    assert not ((codes[:, 0] == colour) & (codes[:, 1] == shape)).any()
    naming = np.mean([t.startswith("name_") for t in batch.task_names])
    assert 0.25 < naming < 0.55
    # evaluation records do show the held-out combination
    records = gen.sample_records(gen.get_task("name_colour"), 400, np.random.default_rng(2))
    assert any((a["colour"], a["shape"]) == gen.HELD_OUT_COMBO for a in records.attributes)


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
