"""Rule space v3: the parser, the public hold-out rule and the recognition ceiling."""

from __future__ import annotations

import numpy as np
import pytest

from dpmtv.embedded import episodes
from dpmtv.embedded import generator as gen
from dpmtv.embedded import rules as R
from dpmtv.embedded import rulespace as S
from dpmtv.embedded.recognition import demos_with_deciding_cell, recognition_ceiling
from dpmtv.errors import ParameterError


def _row(colour, shape, size, position) -> int:
    codes = [gen.VALUES[a].index(v) for a, v in zip(gen.ATTRIBUTES, (colour, shape, size, position))]
    return int(gen.combo_index(np.array(codes)))


@pytest.mark.parametrize(
    ("text", "cell", "expected"),
    [
        ("red", ("red", "cross", "big", "left"), True),
        ("colour=red and shape=circle", ("red", "cross", "big", "left"), False),
        ("not red or circle", ("red", "circle", "big", "left"), True),
        ("red xor big", ("red", "circle", "big", "left"), False),
        ("red xor big", ("blue", "circle", "big", "left"), True),
        ("big and left or red", ("red", "circle", "small", "right"), True),  # and binds tighter
        ("big and (left or red)", ("red", "circle", "small", "right"), False),
        ("red xor circle xor big", ("red", "circle", "big", "right"), True),  # parity of three
        ("NOT (Red AND left)", ("red", "square", "small", "left"), False),
    ],
)
def test_parser_follows_precedence_and_the_attributes(text, cell, expected):
    assert bool(R.truth(R.parse(text))[_row(*cell)]) is expected


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("purple", "unknown word 'purple'"),
        ("red and", "ends too early"),
        ("(red or big", "not closed"),
        ("colour=circle", "colour=circle"),
        ("red big", "unexpected 'big'"),
        ("red & big", "unexpected character '&'"),
        ("", "empty"),
    ],
)
def test_parser_errors_name_the_rule_and_the_problem(text, fragment):
    with pytest.raises(ParameterError, match="rule ") as info:
        R.parse(text)
    assert fragment in str(info.value) and "\n" not in str(info.value)


def test_text_round_trips_through_the_parser():
    for entry in S.rule_entries()[::37]:
        assert np.array_equal(R.truth(R.parse(str(entry.rule))), R.truth(entry.rule)), entry.name


def test_hold_out_rule_is_consistent_with_training_and_the_suite():
    training = [t for t in gen.training_tasks() if t.is_predicate]
    assert len({t.table.tobytes() for t in training}) > 1000  # v2 had 284 predicate names
    assert all(S.trained(t.truth) and S.trained(~t.truth) for t in training)
    held = [t for t in gen.task_suite() if t.held_out]
    assert len(held) == len(gen.HELD_OUT_TASKS) and not any(S.trained(t.truth) for t in held)
    assert all(S.trained(gen.get_task(n).truth) for n in gen.SEEN_EVAL_TASKS)
    # whole shapes never trained, and the legacy ten with their complements stay held out
    never = [e for e in S.rule_entries() if e.shape in S.HELD_OUT_SHAPES]
    assert never and not any(S.trained(e.rule) for e in never)
    assert not S.trained("not green") and not S.trained("not green or not cross")
    assert S.trained("red") and S.trained("red xor big") and not S.trained("red xor circle")
    # every trained table comes from a trained shape; training episodes draw only trained tables
    batch = episodes.sample_episodes(np.random.default_rng(5), 300, 8)
    predicates = [gen.get_task(n) for n in batch.task_names if not n.startswith(("map_", "name_"))]
    assert len(predicates) > 150 and all(S.trained(t.truth) for t in predicates)


def test_recognition_ceiling_matches_brute_force_over_the_trained_tasks():
    rng = np.random.default_rng(11)
    trained = [t for t in gen.all_tasks() if not t.held_out]  # naming and trained predicates, by name
    for name in (*gen.HELD_OUT_TASKS, "map_colour", "is_red"):
        task = gen.get_task(name)
        codes = gen.sample_codes_for_task(task, 96, rng)
        truth = task.answer_indices(codes)
        brute = max(float(np.mean(t.answer_indices(codes) == truth)) for t in trained)
        ceiling = recognition_ceiling(task, codes)
        assert ceiling.accuracy == pytest.approx(brute, abs=1e-12), name
        best = gen.get_task(ceiling.rule) if ceiling.rule in {t.name for t in trained} else None
        if best is not None:  # deciding cells: exactly where that table answers wrong
            wrong = np.flatnonzero(best.table != task.table)
            assert ceiling.deciding_rows == tuple(wrong)
        assert np.mean(~ceiling.deciding_queries) == pytest.approx(ceiling.accuracy, abs=1e-12)
    assert recognition_ceiling(gen.get_task("is_red"), codes).deciding_rows == ()
    assert recognition_ceiling(gen.get_task("map_colour"), codes).accuracy == 0.0


def test_share_of_prompts_with_a_deciding_cell():
    task = gen.get_task("red_and_not_circle")
    ceiling = recognition_ceiling(task, gen.ALL_CODES)  # best: is_red, wrong on red circles
    red_circle = gen.ALL_CODES[[_row("red", "circle", "big", "left")]]
    other = gen.ALL_CODES[[_row("blue", "circle", "big", "left")]]
    demos = np.stack([np.repeat(red_circle, 4, 0), np.repeat(other, 4, 0), np.repeat(other, 4, 0)])
    assert demos_with_deciding_cell(demos, ceiling) == pytest.approx(1 / 3)
