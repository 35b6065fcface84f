"""The demo's deciding-cell bookkeeping on hand-made rows (no model), and --rule's parsing."""

from __future__ import annotations

import json

import numpy as np
import pytest

from dpmtv.data.records import Record
from dpmtv.demo.recognition import per_task_table, summarise_deciding, task_group
from dpmtv.demo.report_tasks import rule_json
from dpmtv.embedded import bayes
from dpmtv.embedded import generator as gen
from dpmtv.errors import ParameterError
from dpmtv.eval.benchmarks.embedded import EmbeddedScorer
from dpmtv.eval.scorers import aggregate_scores


def _deciding(correct: np.ndarray, mask: np.ndarray) -> dict:
    count = int(mask.sum())
    return {"deciding_accuracy": float(correct[mask].mean()) if count else None, "deciding_count": count}


def _row(task, seed, method, correct, mask, epsilon=None, group="held_out"):
    correct, mask = np.array(correct, bool), np.array(mask, bool)
    return {"task": task, "seed": seed, "method": method, "epsilon": epsilon, "group": group,
            "accuracy": float(correct.mean()), **_deciding(correct, mask)}  # fmt: skip


def test_the_scorer_counts_only_deciding_queries_in_deciding_accuracy():
    """The embedded benchmark's ``deciding_accuracy``: eval's mean over the queries that report
    it, so only the deciding-cell queries; absent when there are none."""
    records = [Record(f"q{i}", (), "What is the answer?", "yes") for i in range(4)]
    predictions = ["yes", "no", "yes", "yes"]  # right, wrong, right, right
    scorer = EmbeddedScorer(("yes", "no"), deciding_ids=("q0", "q1"))
    scores = aggregate_scores(scorer.score(r, p) for r, p in zip(records, predictions, strict=True))
    assert scores["accuracy"] == 0.75 and scores["deciding_accuracy"] == 0.5
    none_deciding = EmbeddedScorer(("yes", "no"))
    scores = aggregate_scores(none_deciding.score(r, p) for r, p in zip(records, predictions, strict=True))
    assert "deciding_accuracy" not in scores and scores["accuracy"] == 0.75


def test_deciding_summary_pools_queries_over_tasks_per_seed():
    rows = [
        _row("a", 0, "mtv", [1, 0, 1, 1], [1, 1, 1, 0]),  # 2 of 3 deciding right
        _row("b", 0, "mtv", [0, 1], [1, 0]),  # 0 of 1
        _row("a", 1, "mtv", [1, 1], [1, 1]),  # 2 of 2
        _row("b", 1, "mtv", [1, 1], [0, 0]),  # none deciding
    ]
    out = summarise_deciding(rows, seeds=(0, 1))
    assert out["deciding_count"] == 6
    assert out["deciding_accuracy"] == pytest.approx(np.mean([2 / 4, 2 / 2]))  # pooled per seed


def test_per_task_table_and_json_entry():
    rows = [
        _row("r", 0, "zero-shot", [0, 1, 1], [1, 0, 0]),
        _row("r", 0, "icl-16 (non-private)", [1, 1, 0], [1, 0, 0]),
        _row("r", 0, "mtv (non-private)", [1, 0, 1], [1, 0, 0]),
        _row("r", 0, "dp-mtv", [0, 0, 1], [1, 0, 0], epsilon=1.0),
        _row("r", 0, bayes.GRAMMAR, [1, 1, 1], [1, 0, 0]),
    ]
    rows[1]["demos_with_deciding_cell"] = 0.25
    shot_rows = [_row("r", 0, f"icl-{k} (non-private)", [1, 0], [1, 1]) for k in (1, 4, 64)]
    record = {"trained": False, "ceiling": {"rule": "is_red", "accuracy": 2 / 3}, "deciding_cells": ["x"],
              "deciding_queries": 1}  # fmt: skip
    table = per_task_table(rows, shot_rows, {"r": record})
    entry = json.loads(json.dumps(rule_json("r", table["r"])))
    assert entry["rule"] == "r" and entry["trained"] is False and entry["ceiling"]["rule"] == "is_red"
    assert entry["zero_shot"] == pytest.approx(2 / 3) and entry["mtv"] == pytest.approx(2 / 3)
    assert entry["icl"] == {"1": 0.5, "4": 0.5, "64": 0.5, "16": pytest.approx(2 / 3)}
    assert entry["dp_mtv"] == {"1": pytest.approx(1 / 3)}
    deciding = entry["deciding"]
    assert deciding["count"] == 1 and deciding["zero_shot"] == 0.0 and deciding["icl"]["16"] == 1.0
    assert deciding["dp_mtv"] == {"1": 0.0} and deciding["icl"]["64"] == 0.5
    assert entry["icl_prompts_with_deciding_demo"] == 0.25
    assert entry["bayes"] == {"rule grammar": 1.0} and deciding["bayes"] == {"rule grammar": 1.0}


def test_typed_rules_say_whether_training_drew_their_table():
    assert not gen.rule_task("not red").held_out  # is_not_red was trained
    assert not gen.rule_task("not (red xor big)").held_out  # the complement of a trained table
    held = gen.rule_task("red xor circle xor big")  # a shape training never saw
    assert held.held_out and held.is_predicate and task_group(held, typed=True) == "rules"
    with pytest.raises(ParameterError, match="every image"):
        gen.rule_task("red or not red")
    assert task_group(gen.get_task("map_colour")) == "label_maps"
    assert task_group(gen.get_task("is_red")) == "seen" and task_group(gen.get_task("is_green")) == "held_out"


def test_demo_rejects_a_bad_rule_in_one_line():
    from click.testing import CliRunner

    from dpmtv.cli import main

    result = CliRunner().invoke(main, ["demo", "--quick", "--rule", "red and purple"])
    assert result.exit_code != 0
    assert "rule 'red and purple': unknown word 'purple'" in " ".join(result.output.split())
