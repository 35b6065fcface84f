"""Scorers against hand-checked cases, including the tricky corners of the VQA normalisation."""

from __future__ import annotations

import pytest

from dpmtv.data.records import Record
from dpmtv.errors import ParameterError
from dpmtv.eval.normalise import CONTRACTIONS, normalise_vqa_answer
from dpmtv.eval.scorers import (
    ExactMatchScorer,
    MedicalScorer,
    OptionLetterScorer,
    VQAScorer,
    aggregate_scores,
    closed_exact_match,
    extract_option_letter,
    is_yes_no_question,
    open_exact_match,
    token_recall,
    vqa_accuracy,
)


@pytest.mark.parametrize(
    ("raw", "normal"),
    [
        # numbers as words -> digits, articles dropped, lower case
        ("Two", "2"),
        ("the two dogs", "2 dogs"),
        ("None", "0"),
        ("ten", "10"),
        ("eleven", "eleven"),  # only none/zero..ten are mapped
        ("A dog", "dog"),
        ("an apple", "apple"),
        # punctuation inside numbers: digit-comma glues, decimals survive, trailing period goes
        ("1,000", "1000"),
        ("3.5", "3.5"),
        ("5.", "5"),
        ("$1,500.00", "$1500.00"),  # glued comma; both periods precede digits
        ("1,000-2,000", "10002000"),  # a digit-comma anywhere removes every mark (official quirk)
        ("2:30", "2:30"),  # colon is not punctuation
        # punctuation between words: space-adjacent marks vanish, others become spaces
        ("Yes, it is", "yes it is"),
        ("red,white", "red white"),
        ("t-shirt", "t shirt"),
        ("one-way", "1 way"),  # split first, then the number word maps
        ("black & white!", "black & white"),
        ("a.m.", "am"),
        ("(A)", ""),  # brackets become spaces and 'a' is an article
        # contractions restored, apostrophes kept
        ("dont", "don't"),
        ("Isnt it?", "isn't it"),
        ("It's a dog.", "it's dog"),
        ("somebody'd", "somebodyd"),  # the official table's reversed entry
        ("Im", "im"),  # capitalised keys never match after lower-casing
        ("  yes\n", "yes"),
        ("left\tlung", "left lung"),
    ],
)
def test_vqa_normalisation(raw, normal):
    assert normalise_vqa_answer(raw) == normal


def test_normal_form_is_idempotent_and_table_complete():
    for raw in ["1,000", "t-shirt", "The two dogs", "dont", "3.5 m", "a.m."]:
        once = normalise_vqa_answer(raw)
        assert normalise_vqa_answer(once) == once
    assert len(CONTRACTIONS) == 120 and CONTRACTIONS["wont"] == "won't"


@pytest.mark.parametrize(
    ("matches", "expected"), [(0, 0.0), (1, 0.3), (2, 0.6), (3, 0.9), (4, 1.0), (10, 1.0)]
)
def test_vqa_accuracy_leave_one_out(matches, expected):
    # c matching of 10: (c·min(1,(c-1)/3) + (10-c)·min(1,c/3)) / 10, worked by hand:
    # c=1: 9·(1/3)/10 = .3; c=2: (2/3 + 8·2/3)/10 = .6; c=3: (3·2/3 + 7)/10 = .9
    answers = ["2"] * matches + ["many"] * (10 - matches)
    for rule in ("vqa", "vizwiz", "lenient"):
        assert vqa_accuracy("2", answers, rule=rule) == pytest.approx(expected)


def test_vqa_accuracy_rules_differ_where_the_evaluators_do():
    raw = ["Two."] * 3 + ["three"] * 7
    assert vqa_accuracy("2", raw, rule="lenient") == pytest.approx(0.9)
    assert vqa_accuracy("2", raw, rule="vqa") == pytest.approx(0.9)  # 2021: references normalised too
    assert vqa_accuracy("2", raw, rule="vizwiz") == 0.0  # references compared as written
    # the pre-2021 VQA rule scored this 0.0 (normalised prediction vs raw references)
    assert vqa_accuracy("Yes", ["Yes"] * 10, rule="vqa") == 1.0
    with pytest.raises(ParameterError, match="rule"):
        vqa_accuracy("2", raw, rule="fuzzy")
    with pytest.raises(ParameterError, match="at least one"):
        vqa_accuracy("2", [], rule="vqa")


@pytest.mark.parametrize(
    ("prediction", "options", "letter"),
    [
        ("B", (), "B"),
        ("(b)", ("rose", "daisy"), "B"),
        ("A.", ("rose", "daisy"), "A"),
        ("B) daisy", ("rose", "daisy"), "B"),
        ("daisy", ("rose", "daisy"), "B"),
        ("A rose", ("rose", "daisy"), "A"),  # the article, not the letter: matched by the option text
        ("It is a daisy.", ("rose", "daisy"), "B"),
        ("rose or daisy", ("rose", "daisy"), None),
        ("C", ("rose", "daisy"), None),
        ("", ("rose", "daisy"), None),
    ],
)
def test_option_letter_extraction(prediction, options, letter):
    assert extract_option_letter(prediction, options) == letter


def test_closed_and_open_metrics():
    assert closed_exact_match("Yes, it is.", "yes") == 1.0
    assert closed_exact_match("no", "Yes") == 0.0
    assert closed_exact_match("yesterday", "yes") == 0.0
    assert closed_exact_match("Left lung", "left lung") == 1.0
    assert closed_exact_match("left", "left lung") == 0.0
    assert open_exact_match("The liver.", "liver") == 1.0
    assert token_recall("right upper lobe", "upper lobe of the lung") == pytest.approx(2 / 4)
    assert token_recall("", "") == 1.0


def _record(rid: str, answer: str = "") -> Record:
    return Record(rid, (), "q", answer, has_explicit_id=True)


def test_scorers_bind_references_and_candidates():
    vqa = VQAScorer({"q1": ["Two"] * 10, "q2": ["red"] * 4 + ["blue"] * 6}, rule="lenient")
    assert vqa.score(_record("q1"), "2") == {"vqa_accuracy": 1.0}
    assert vqa.candidates(_record("q2")) == ("2", "blue", "red")
    assert list(vqa.candidate_scores(_record("q2"), ["2", "blue", "red"])) == pytest.approx([0.0, 1.0, 1.0])
    with pytest.raises(ParameterError, match="no reference for query 'q9'"):
        vqa.score(_record("q9"), "2")

    option = OptionLetterScorer({"e1": ("rose", "daisy")})
    assert option.score(_record("e1", "B"), "daisy") == {"accuracy": 1.0}
    assert option.vote_key(_record("e1", "B"), "(b)") == "B" and option.candidates(_record("e1")) == (
        "A",
        "B",
    )

    medical = MedicalScorer({"c": "closed", "o": "open"}, {"c": "yes", "o": "liver"})
    assert medical.score(_record("c", "yes"), "Yes.") == {"closed_accuracy": 1.0}
    assert medical.score(_record("o", "liver"), "the liver") == {"open_exact_match": 1.0, "open_recall": 1.0}
    assert medical.candidates(_record("c", "yes")) == ("no", "yes")  # the one closed vocabulary
    assert medical.vote_key(_record("c", "yes"), "No, it is not") == "no"

    exact = ExactMatchScorer.for_queries([_record("a", "Red"), _record("b", "blue")])
    assert exact.candidates(_record("a")) == ("blue", "red")
    scores = [exact.score(_record("a", "red"), "red"), exact.score(_record("b", "blue"), "red")]
    assert aggregate_scores(scores) == {"accuracy": 0.5, "token_recall": 0.5}


def test_closed_medical_candidates_do_not_depend_on_the_gold_answer():
    """Two closed queries with the same question but different gold answers get the same
    candidates (the old rule gave yes/no only when the gold answer was yes/no)."""
    kinds = {"a": "closed", "b": "closed", "c": "closed"}
    gold = {"a": "yes", "b": "left", "c": "CT"}
    questions = {"a": "Is there a fracture?", "b": "Is there a fracture?", "c": "Is this an MRI or a CT?"}
    medical = MedicalScorer(kinds, gold, questions)
    assert (
        medical.candidates(_record("a", "yes")) == medical.candidates(_record("b", "left")) == ("yes", "no")
    )
    assert medical.candidates(_record("c", "CT")) == ("ct", "left", "no", "yes")
    swapped = MedicalScorer(kinds, {"a": "left", "b": "yes", "c": "CT"}, questions)
    assert swapped.candidates(_record("a")) == medical.candidates(_record("a"))


@pytest.mark.parametrize(
    ("question", "yes_no"),
    [
        ("Is there a fracture?", True),
        ("Does the liver appear normal?\nAnswer the question using a single word or phrase.", True),
        ("Are the kidneys or the liver enlarged?", False),
        ("Which side is the lesion on?", False),
        ("", False),
    ],
)
def test_yes_no_questions_are_recognised_from_the_question(question, yes_no):
    assert is_yes_no_question(question) is yes_no
