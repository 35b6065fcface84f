"""Closed-answer scores in `dpmtv eval`: accuracy from the probabilities, AUROC and ECE."""

import json
import math

import numpy as np
import pytest
from click.testing import CliRunner

from dpmtv.cli import main
from dpmtv.eval.choice_scores import auroc, choice_metrics, expected_calibration_error


def test_auroc_and_ece_by_hand():
    scores = np.array([0.9, 0.8, 0.3, 0.8])
    positive = np.array([True, False, False, True])
    # positives 0.9, 0.8 against negatives 0.8, 0.3: 1 + 1 + 0.5 + 1 of 4 pairs
    assert auroc(scores, positive) == pytest.approx(3.5 / 4)
    confidence = np.array([0.95, 0.95, 0.55, 0.55])
    correct = np.array([True, False, True, True])
    # bin 9: accuracy 0.5 at confidence 0.95; bin 5: accuracy 1 at 0.55; each half the queries
    assert expected_calibration_error(confidence, correct) == pytest.approx(0.5 * 0.45 + 0.5 * 0.45)
    metrics = choice_metrics([{"no": 0.2, "yes": 0.8}, {"no": 0.7, "yes": 0.3}], ["yes", "Yes"])
    assert metrics["score_accuracy"] == 0.5 and math.isnan(metrics["auroc"])


def test_eval_prints_auroc_and_ece_for_a_two_way_embedded_task(tmp_path):
    out = tmp_path / "eval"
    args = ["eval", "--benchmark", "embedded:big_and_left", "--model", "embedded",
            "--methods", "zero-shot,mtv", "--non-private", "--heads", "layers:0", "--seeds", "1",
            "--max-train", "16", "--max-queries", "12", "--out", str(out)]  # fmt: skip
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    assert "## Scores over the closed answer set" in result.output
    section = result.output.split("## Scores over the closed answer set")[1].split("\n## ")[0]
    assert "AUROC" in section and "ECE" in section
    runs = json.loads((out / "results.json").read_text())["runs"]
    for run in runs:
        scores = run["details"]["choice_scores"]
        assert 0 <= scores["score_accuracy"] <= 1 and 0 <= scores["ece"] <= 1
        assert scores["auroc"] is None or 0 <= scores["auroc"] <= 1  # None: one class only
