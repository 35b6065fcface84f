"""VQA accuracy under each rule against expected values worked out BY HAND from the evaluators'
code (GT-Vision-Lab/VQA vqaEval.py, 2021 revision, for "vqa"; the VizWiz-VQA evaluator for
"vizwiz"; both sides normalised for "lenient"). Nothing here is computed by dpmtv.

Each row: prediction | references | vqa | vizwiz | lenient. References are written
``answer*count`` joined by ``;`` (``yes*7;no*3`` = seven "yes" and three "no"); ``\\t``/``\\n``
and ``{32 dots}`` are spelled out in the prediction. With c of 10 references matching, the
leave-one-out mean is c=1 → 0.3, 2 → 0.6, 3 → 0.9, ≥4 → 1 (derived in the comment per row only
where n ≠ 10).
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from dpmtv.eval.scorers import VQA_RULES, vqa_accuracies, vqa_accuracy

# fmt: off
CASES = [
    # --- all ten references identical: "vqa" compares the stripped strings raw ---------------
    ("Yes", "Yes*10", 1, 0, 1),  # the 2021 fix: raw match; vizwiz normalises only the prediction
    ("yes", "Yes*10", 0, 0, 1),
    ("yes", "yes*10", 1, 1, 1),
    ("Yes", "yes*10", 0, 1, 1),
    (" yes ", "yes*10", 1, 1, 1),
    ("yes.", "yes*10", 0, 1, 1),
    ("yes\n", "yes*10", 1, 1, 1),
    ("two", "2*10", 0, 1, 1),
    ("2", "two*10", 0, 0, 1),
    ("the dog", "dog*10", 0, 1, 1),
    ("dog", "the dog*10", 0, 0, 1),
    ("t-shirt", "t-shirt*10", 1, 0, 1),  # vizwiz: prediction becomes "t shirt"
    ("dont", "don't*10", 0, 0, 1),  # vizwiz: "dont" -> "don’t" (typographic apostrophe)
    ("dont", "dont*10", 1, 0, 1),
    ("don't", "don't*10", 1, 1, 1),
    ("", "*10", 1, 1, 1),
    ("unanswerable", "unanswerable*10", 1, 1, 1),
    ("Unanswerable", "unanswerable*10", 0, 1, 1),
    ("1,000", "1,000*10", 1, 0, 1),  # vizwiz: prediction becomes "1000"
    ("1000", "1,000*10", 0, 0, 1),
    ("3.5", "3.5*10", 1, 1, 1),
    ("red ", "red*10", 1, 1, 1),
    ("RED", "red*10", 0, 1, 1),
    ("a", "a*10", 1, 0, 1),  # normalised, "a" is an article and vanishes
    ("none", "0*10", 0, 1, 1),
    ("None", "none*10", 0, 0, 1),
    # --- references differ: "vqa" normalises both sides ----------------------------------------
    ("Yes", "yes*9;Yes*1", 1, 1, 1),
    ("Yes", "Yes*1;no*9", 0.3, 0, 0.3),
    ("yes", "yes*3;no*7", 0.9, 0.9, 0.9),
    ("no", "yes*3;no*7", 1, 1, 1),
    ("yes", "yes*2;no*8", 0.6, 0.6, 0.6),
    ("maybe", "yes*5;no*5", 0, 0, 0),
    ("two", "2*4;3*6", 1, 1, 1),
    ("two", "two*2;2*2;3*6", 1, 0.6, 1),
    ("the dog", "dog*2;the dog*1;cat*7", 0.9, 0.6, 0.9),
    ("t-shirt", "t-shirt*3;shirt*7", 0.9, 0, 0.9),
    ("t-shirt", "t shirt*2;t-shirt*2;shirt*6", 1, 0.6, 1),
    ("dont", "don't*4;yes*6", 1, 0, 1),
    ("1,000", "1,000*2;1000*2;100*6", 1, 0.6, 1),
    ("yes, it is", "yes it is*2;yes*8", 0.6, 0.6, 0.6),
    ("Yes!", "yes*5;no*5", 1, 1, 1),
    ("yes", "Yes!*5;no*5", 1, 0, 1),
    ("", "*1;yes*9", 0.3, 0.3, 0.3),  # an empty annotator answer is a reference like any other
    ("an apple", "apple*3;an apple*1;orange*6", 1, 0.9, 1),
    ("It's red", "it's red*2;red*8", 0.6, 0.6, 0.6),
    ("its red", "it's red*2;red*8", 0, 0, 0),
    ("ten", "10*3;ten*1;11*6", 1, 0.9, 1),
    ("twelve", "twelve*3;12*7", 0.9, 0.9, 0.9),
    # --- periods ----------------------------------------------------------------------------------
    ("3.5.", "3.5*4;4*6", 1, 1, 1),
    ("5.", "5*2;6*8", 0.6, 0.6, 0.6),
    ("e.g", "eg*3;x*7", 0.9, 0.9, 0.9),
    (".5", "5*3;.5*7", 1, 1, 1),
    ("yes{32 dots}", "yes*4;no*6", 1, 1, 1),
    ("yes{33 dots}", "yes*4;no*6", 0, 0, 0),  # re.UNICODE (32) passed as the count: one survives
    # --- punctuation: tested on the original text ----------------------------------------------
    ("black/white", "black white*4;x*6", 1, 1, 1),
    ("black / white", "black white*4;x*6", 1, 1, 1),
    ("black /white", "black white*4;x*6", 1, 1, 1),
    ("1,000-2,000", "10002000*3;x*7", 0.9, 0.9, 0.9),  # a digit comma deletes every mark
    ("up-to-date, yes", "up to date yes*3;x*7", 0.9, 0.9, 0.9),
    ("(a) dog", "dog*3;x*7", 0.9, 0.9, 0.9),
    # --- contraction tables (VQA: ASCII apostrophes; VizWiz: mostly typographic) -----------------
    ("Im", "i'm*3;x*7", 0, 0, 0),  # the key "Im" never matches after lower-casing
    ("im", "im*3;x*7", 0.9, 0.9, 0.9),
    ("somebody'd", "somebodyd*3;x*7", 0.9, 0, 0.9),
    ("somebody\u2019d", "somebodyd*3;x*7", 0, 0.9, 0),
    ("wont", "won't*4;x*6", 1, 0, 1),
    ("wont", "won\u2019t*4;x*6", 0, 1, 0),
    ("weve", "we've*4;x*6", 1, 1, 1),
    ("cant", "can't*4;x*6", 1, 1, 1),
    ("didnt", "didn't*4;x*6", 1, 0, 1),
    ("whove", "who've*3;x*7", 0.9, 0.9, 0.9),
    ("wheres", "where's*3;x*7", 0.9, 0.9, 0.9),
    ("whos", "who's*3;x*7", 0.9, 0, 0.9),
    ("couldn'tve", "couldn't've*3;x*7", 0.9, 0, 0.9),
    ("couldn'tve", "couldn\u2019t\u2019ve*3;x*7", 0, 0.9, 0),
    ("hadnt've", "hadn't've*4;x*6", 1, 0, 1),
    # --- articles and number words inside phrases ---------------------------------------------
    ("the one", "1*4;x*6", 1, 1, 1),
    ("A Cat", "cat*2;a cat*2;x*6", 1, 0.6, 1),
    ("an", "an*2;x*8", 0.6, 0, 0.6),
    ("zero", "0*1;none*1;x*8", 0.6, 0.3, 0.6),
    # --- whitespace ---------------------------------------------------------------------------------
    ("yes\tno", "yes no*3;x*7", 0.9, 0.9, 0.9),
    ("  two  dogs ", "2 dogs*3;x*7", 0.9, 0.9, 0.9),
    ("yes", " yes*4;no*6", 1, 0, 1),  # vizwiz does not even strip the references
    ("yes", " yes*10", 1, 0, 1),
    ("yes", "yes*5;yes *5", 1, 1, 1),
    ("Yes", "yes*5;yes *5", 0, 1, 1),  # identical once stripped, so "vqa" compares raw
    # --- match counts and other numbers of annotators ---------------------------------------
    ("cat", "cat*1;dog*9", 0.3, 0.3, 0.3),
    ("cat", "cat*2;dog*8", 0.6, 0.6, 0.6),
    ("cat", "cat*3;dog*7", 0.9, 0.9, 0.9),
    ("cat", "cat*4;dog*6", 1, 1, 1),
    ("cat", "cat*10", 1, 1, 1),
    ("dog", "cat*10", 0, 0, 0),
    ("cat", "cat*1;dog*2", 2 / 9, 2 / 9, 2 / 9),  # (0 + 1/3 + 1/3) / 3
    ("cat", "cat*2;dog*1", 4 / 9, 4 / 9, 4 / 9),  # (1/3 + 1/3 + 2/3) / 3
    ("cat", "cat*3", 2 / 3, 2 / 3, 2 / 3),  # each sees 2 of the others
    ("cat", "cat*1", 0, 0, 0),  # a lone annotator left out leaves nobody to match
    ("cat", "cat*4;dog*1", 1, 1, 1),  # (4·1 + 1·1) / 5
    ("cat", "cat*2;dog*3", 8 / 15, 8 / 15, 8 / 15),  # (2·1/3 + 3·2/3) / 5
    # --- case and mixtures ------------------------------------------------------------------------
    ("Dog", "Dog*10", 1, 0, 1),
    ("dog", "Dog*9;dog*1", 1, 0.3, 1),
    ("Dog.", "Dog*9;dog*1", 1, 0.3, 1),
    ("Dog.", "Dog.*10", 1, 0, 1),
    ("dog", "Dog.*10", 0, 0, 1),
    ("yes", "yes*4;Yes*3;YES*3", 1, 1, 1),
    ("YES", "YES*3;no*7", 0.9, 0, 0.9),
    ("1 000", "1,000*4;x*6", 0, 0, 0),
    ("10:30", "10:30*3;1030*7", 0.9, 0.9, 0.9),  # colons are not punctuation
    ("#1", "#1*3;x*7", 0.9, 0.9, 0.9),
    ("a/b", "a b*3;b*2;x*5", 1, 0.6, 1),  # "a b" -> "b": the article goes
    ("one-way", "1 way*3;x*7", 0.9, 0.9, 0.9),
    ("One", "1*10", 0, 1, 1),
    # --- \d is ASCII-only, as in the original Python 2 code ----------------------------------
    ("\u0661,\u0660\u0660\u0660", "\u0661 \u0660\u0660\u0660*4;x*6", 1, 1, 1),  # no digit comma: "," -> " "
    ("\u0663.\u0665", "\u0663\u0665*3;x*7", 0.9, 0.9, 0.9),  # the period goes: not before an ASCII digit
]
# fmt: on


def _answers(spec: str) -> list[str]:
    out = []
    for part in spec.split(";"):
        text, _, count = part.rpartition("*")
        out += [text] * int(count)
    return out


def _prediction(text: str) -> str:
    return text.replace("{32 dots}", "." * 32).replace("{33 dots}", "." * 33)


def _expected(row, rule: str) -> float:
    return float(row[2 + VQA_RULES.index(rule)])


@pytest.mark.parametrize("rule", VQA_RULES)
def test_each_rule_has_at_least_100_hand_derived_cases(rule):
    assert len(CASES) >= 100
    assert len({(row[0], row[1]) for row in CASES}) == len(CASES)  # no duplicated case


@pytest.mark.parametrize("rule", VQA_RULES)
def test_vqa_accuracy_matches_every_hand_derived_case(rule):
    disagreements = [
        (row[0], row[1], _expected(row, rule), got)
        for row in CASES
        if not math.isclose(
            got := vqa_accuracy(_prediction(row[0]), _answers(row[1]), rule=rule),
            _expected(row, rule),
            rel_tol=1e-12,
            abs_tol=1e-12,
        )
    ]
    assert disagreements == []


@pytest.mark.parametrize("rule", VQA_RULES)
def test_batched_path_agrees_with_the_scalar_one(rule):
    for row in CASES:
        answers = _answers(row[1])
        predictions = [_prediction(other[0]) for other in CASES[:40]] + [_prediction(row[0])]
        batched = vqa_accuracies(predictions, answers, rule=rule)
        scalar = np.array([vqa_accuracy(p, answers, rule=rule) for p in predictions])
        np.testing.assert_allclose(batched, scalar, rtol=1e-12, atol=1e-12)
