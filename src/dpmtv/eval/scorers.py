"""Scorers: per-query metrics, the answer normal form DP-ICL votes over, and its candidates.

Metric functions (pure, on strings):

* :func:`vqa_accuracy` — the VQA accuracy: for each of the ``n`` (10) annotator answers, leave it
  out and score ``min(1, #matches among the other n−1 / 3)``; average the ``n`` scores. With
  ``c`` of 10 answers matching: ``c = 1 → 0.3``, ``2 → 0.6``, ``3 → 0.9``, ``≥ 4 → 1``. What
  "matching" means is the ``rule``: ``"vqa"`` (the official VQA evaluator), ``"vizwiz"`` (the
  VizWiz evaluator) or ``"lenient"`` (both sides normalised; a labelled deviation).
* :func:`option_letter_accuracy` — the predicted option letter equals the gold one.
* :func:`closed_exact_match` — normalised exact match; a yes/no gold answer is matched against the
  prediction's first word (``"yes, it is"`` → ``yes``).
* :func:`open_exact_match`, :func:`token_recall` — normalised exact match, and the fraction of
  the gold answer's distinct tokens present in the prediction.

A :class:`Scorer` binds these to a benchmark: it scores a query record, names its metrics (the
first is the primary one, plotted), normalises predictions into vote keys and lists each query's
PUBLIC candidate answers for DP-ICL. Candidate lists come from the benchmark's TEST references
(or the options / yes-no), never from the private demonstration pool.
"""

from __future__ import annotations

import math
import re
from abc import ABC, abstractmethod
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import ClassVar

import numpy as np

from dpmtv.data.records import Record
from dpmtv.errors import ParameterError
from dpmtv.eval.normalise import (
    VIZWIZ_CONTRACTIONS,
    normalise_vqa_answer,
    process_digit_article,
    process_punctuation,
)

__all__ = [
    "ExactMatchScorer",
    "MedicalScorer",
    "OptionLetterScorer",
    "Scorer",
    "VQAScorer",
    "aggregate_scores",
    "closed_exact_match",
    "extract_option_letter",
    "is_yes_no_question",
    "normalise_answer",
    "open_exact_match",
    "option_letter_accuracy",
    "VQA_RULES",
    "token_recall",
    "vqa_accuracies",
    "vqa_accuracy",
]

YES_NO = ("yes", "no")
LETTERS = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
normalise_answer = normalise_vqa_answer  # one normal form for every scorer


# ---- metric functions ------------------------------------------------------------------------
#: The VQA-accuracy rules (:func:`vqa_accuracy`); ``lenient`` is a deviation from both evaluators.
VQA_RULES = ("vqa", "vizwiz", "lenient")


def vqa_accuracy(prediction: str, answers: Sequence[str], *, rule: str) -> float:
    """VQA accuracy of ``prediction`` against the ``n`` annotators' ``answers`` under ``rule``.

    Every rule scores ``min(1, #matches among the other n−1 / 3)`` for each annotator left out,
    averaged over the ``n`` of them (by index: one annotator per entry, as with VQA's distinct
    ``answer_id`` and VizWiz's ``i != j``). What counts as a match depends on the rule:

    * ``"vqa"`` — GT-Vision-Lab/VQA ``vqaEval.py`` since its 2021 revision: both sides are
      stripped (newlines and tabs → spaces); ONLY when the stripped references are not all
      identical are references and prediction put in the normal form
      (:func:`~dpmtv.eval.normalise.normalise_vqa_answer`); otherwise the raw stripped strings
      are compared (``'Yes'`` vs 10 × ``'Yes'`` → 1, ``'yes'`` vs 10 × ``'Yes'`` → 0).
    * ``"vizwiz"`` — the VizWiz-VQA evaluator: only the prediction is normalised (with
      :data:`~dpmtv.eval.normalise.VIZWIZ_CONTRACTIONS`); references are compared as written,
      not even stripped (``'yes'`` vs 10 × ``'Yes'`` → 0).
    * ``"lenient"`` — both sides always normalised (a deviation from both evaluators, reported
      as such).

    Raises:
        ParameterError: no reference answers, or an unknown rule.
    """
    references, transform = _match_forms(answers, rule)
    return float(_leave_one_out(Counter(references)[transform(prediction)], len(references)))


def vqa_accuracies(predictions: Sequence[str], answers: Sequence[str], *, rule: str) -> np.ndarray:
    """:func:`vqa_accuracy` of many predictions against one reference list: float64 ``(P,)``."""
    references, transform = _match_forms(answers, rule)
    counts = Counter(references)
    matches = np.array([counts.get(transform(p), 0) for p in predictions], dtype=np.float64)
    return _leave_one_out(matches, len(references))


def _leave_one_out(count, n: int):
    """Mean over annotators of ``min(1, matches among the others / 3)`` when ``count`` of the
    ``n`` match: a matching annotator sees ``count − 1`` matches, another sees ``count``."""
    return (count * np.minimum(1.0, (count - 1) / 3) + (n - count) * np.minimum(1.0, count / 3)) / n


def _match_forms(answers: Sequence[str], rule: str) -> tuple[list[str], Callable[[str], str]]:
    """The references as compared under ``rule``, and what the prediction becomes."""
    if not answers:
        raise ParameterError("vqa_accuracy needs at least one reference answer, got none")
    if rule == "lenient":
        return [normalise_vqa_answer(a) for a in answers], normalise_vqa_answer
    if rule == "vizwiz":
        return list(answers), _vizwiz_prediction
    if rule == "vqa":
        stripped = [_strip(a) for a in answers]
        if len(set(stripped)) > 1:
            return [normalise_vqa_answer(a) for a in stripped], normalise_vqa_answer
        return stripped, _strip
    raise ParameterError(f"unknown VQA accuracy rule {rule!r}; use one of {', '.join(VQA_RULES)}")


def _strip(text: str) -> str:
    return text.replace("\n", " ").replace("\t", " ").strip()


def _vizwiz_prediction(text: str) -> str:
    return process_digit_article(process_punctuation(_strip(text)), VIZWIZ_CONTRACTIONS)


_LETTER_ALONE = re.compile(r"^\(?([A-Za-z])\)?[.:)]?$")
_LETTER_MARKED = re.compile(r"^\(?([A-Z])(?:\)|[.:])")


def extract_option_letter(prediction: str, options: Sequence[str] = ()) -> str | None:
    """The option letter a prediction names, or ``None``.

    In order: the whole answer is one letter (``B``, ``(b)``, ``B.``); it starts with a marked
    capital letter (``B) rose``, ``B. rose``); its normal form equals one option's text; exactly
    one option's text occurs in it. Letters beyond ``len(options)`` are refused when options are
    given.
    """
    text = prediction.strip()
    valid = LETTERS[: len(options)] if options else LETTERS
    for pattern in (_LETTER_ALONE, _LETTER_MARKED):
        match = pattern.match(text)
        if match and match.group(1).upper() in valid:
            return match.group(1).upper()
    norm, names = normalise_answer(text), [normalise_answer(o) for o in options]
    if norm in names:
        return LETTERS[names.index(norm)]
    contained = [i for i, name in enumerate(names) if name and re.search(rf"\b{re.escape(name)}\b", norm)]
    return LETTERS[contained[0]] if len(contained) == 1 else None


def option_letter_accuracy(prediction: str, gold_letter: str, options: Sequence[str] = ()) -> float:
    return float(extract_option_letter(prediction, options) == gold_letter.strip().upper())


def closed_exact_match(prediction: str, answer: str) -> float:
    gold, pred = normalise_answer(answer), normalise_answer(prediction)
    if gold in YES_NO:
        return float(pred.split()[:1] == [gold])
    return float(pred == gold)


def open_exact_match(prediction: str, answer: str) -> float:
    return float(normalise_answer(prediction) == normalise_answer(answer))


def token_recall(prediction: str, answer: str) -> float:
    gold = set(normalise_answer(answer).split())
    if not gold:
        return float(not normalise_answer(prediction))
    return len(gold & set(normalise_answer(prediction).split())) / len(gold)


def aggregate_scores(scores: Iterable[Mapping[str, float]]) -> dict[str, float]:
    """Mean of each metric over the queries that report it."""
    totals: dict[str, list[float]] = {}
    for score in scores:
        for metric, value in score.items():
            totals.setdefault(metric, []).append(value)
    return {metric: math.fsum(values) / len(values) for metric, values in totals.items()}


# ---- scorers ---------------------------------------------------------------------------------
class Scorer(ABC):
    """Binds metric functions to a benchmark's queries (looked up by ``record_id``)."""

    metrics: tuple[str, ...]
    #: How the queries are scored, in the plain words a report prints (no code names: a report's
    #: reader may never have seen the code).
    scoring_in_words: ClassVar[str] = "each answer scored by the benchmark's rule"

    @property
    def primary(self) -> str:
        return self.metrics[0]

    @property
    def description(self) -> str:
        """How the queries are scored, as reports name it."""
        return self.scoring_in_words

    @abstractmethod
    def score(self, record: Record, prediction: str) -> dict[str, float]:
        """The metrics of one query (a subset of :attr:`metrics`)."""

    def vote_key(self, record: Record, prediction: str) -> str:
        """The normal form under which DP-ICL counts a chunk's answer."""
        return normalise_answer(prediction)

    @abstractmethod
    def candidates(self, record: Record) -> tuple[str, ...]:
        """Public candidate vote keys for this query (DP-ICL's histogram bins)."""

    def candidate_scores(self, record: Record, candidates: Sequence[str]) -> np.ndarray:
        """The primary metric of each candidate released as the answer (NaN where undefined)."""
        return np.array([self.score(record, c).get(self.primary, math.nan) for c in candidates])

    def _lookup(self, table: Mapping[str, object], record: Record) -> object:
        try:
            return table[record.record_id]
        except KeyError:
            raise ParameterError(
                f"{type(self).__name__} has no reference for query '{record.record_id}' ({record.where})"
            ) from None


def _vocabulary(answers: Iterable[str]) -> tuple[str, ...]:
    return tuple(sorted({normalise_answer(a) for a in answers} - {""}))


class ExactMatchScorer(Scorer):
    """Normalised exact match of ``record.answer`` (generic records; see also ``EmbeddedScorer``)."""

    metrics = ("accuracy", "token_recall")
    scoring_in_words: ClassVar[str] = (
        "accuracy: the answer equals the expected answer once both are normalised (lower case, no "
        "punctuation or articles); token_recall: the share of the expected answer's words the answer holds"
    )

    def __init__(self, vocabulary: Iterable[str]):
        self.vocabulary = _vocabulary(vocabulary)

    @classmethod
    def for_queries(cls, queries: Sequence[Record]) -> ExactMatchScorer:
        return cls(r.answer for r in queries)

    def score(self, record: Record, prediction: str) -> dict[str, float]:
        return {
            "accuracy": open_exact_match(prediction, record.answer),
            "token_recall": token_recall(prediction, record.answer),
        }

    def candidates(self, record: Record) -> tuple[str, ...]:
        return self.vocabulary


class VQAScorer(Scorer):
    """VQA accuracy against each query's annotator answers, under one of :data:`VQA_RULES`
    (``"vqa"`` by default; VizWiz uses ``"vizwiz"``)."""

    metrics = ("vqa_accuracy",)

    def __init__(self, references: Mapping[str, Sequence[str]], *, rule: str = "vqa"):
        if rule not in VQA_RULES:
            raise ParameterError(f"unknown VQA accuracy rule {rule!r}; use one of {', '.join(VQA_RULES)}")
        self.rule = rule
        self.references = {key: tuple(value) for key, value in references.items()}
        self.vocabulary = _vocabulary(a for answers in self.references.values() for a in answers)

    @property
    def description(self) -> str:
        return VQA_RULE_DESCRIPTIONS[self.rule]

    def score(self, record: Record, prediction: str) -> dict[str, float]:
        refs = self._lookup(self.references, record)
        return {"vqa_accuracy": float(vqa_accuracy(prediction, refs, rule=self.rule))}

    def candidates(self, record: Record) -> tuple[str, ...]:
        return self.vocabulary

    def candidate_scores(self, record: Record, candidates: Sequence[str]) -> np.ndarray:
        """Fast path: one reference preparation for all candidates."""
        return vqa_accuracies(candidates, self._lookup(self.references, record), rule=self.rule)


#: How each rule is named in reports.
VQA_RULE_DESCRIPTIONS = {
    "vqa": "VQA accuracy, official VQA evaluator rule (GT-Vision-Lab/VQA vqaEval.py, 2021)",
    "vizwiz": "VQA accuracy, VizWiz evaluator rule (prediction normalised, references as written)",
    "lenient": "VQA accuracy, lenient rule (both sides normalised; DEVIATES from the official evaluators)",
}


class OptionLetterScorer(Scorer):
    """Option-letter accuracy; ``record.answer`` is the gold letter."""

    metrics = ("accuracy",)
    scoring_in_words: ClassVar[str] = "accuracy: the option letter the answer names is the correct one"

    def __init__(self, options: Mapping[str, Sequence[str]]):
        self.options = {key: tuple(value) for key, value in options.items()}

    def score(self, record: Record, prediction: str) -> dict[str, float]:
        options = self._lookup(self.options, record)
        return {"accuracy": option_letter_accuracy(prediction, record.answer, options)}

    def vote_key(self, record: Record, prediction: str) -> str:
        letter = extract_option_letter(prediction, self._lookup(self.options, record))
        return letter if letter is not None else normalise_answer(prediction)

    def candidates(self, record: Record) -> tuple[str, ...]:
        return tuple(LETTERS[: len(self._lookup(self.options, record))])


class MedicalScorer(Scorer):
    """Closed questions by exact match, open ones by exact match and token recall (separately)."""

    metrics = ("closed_accuracy", "open_exact_match", "open_recall")
    scoring_in_words: ClassVar[str] = (
        "closed (yes/no) questions: the normalised answer equals the expected one; open questions, "
        "separately: the same exact match, and the share of the expected answer's words the answer holds"
    )

    def __init__(
        self,
        kinds: Mapping[str, str],
        answers: Mapping[str, str],
        questions: Mapping[str, str] | None = None,
    ):
        bad = {kind for kind in kinds.values()} - {"closed", "open"}
        if bad:
            raise ParameterError(f"question kinds must be 'closed' or 'open', got {sorted(bad)}")
        self.kinds = dict(kinds)
        self.questions = dict(questions or {})
        self.closed_vocabulary = _vocabulary(
            [*YES_NO, *(answers[k] for k, kind in kinds.items() if kind == "closed")]
        )
        self.open_vocabulary = _vocabulary(answers[k] for k, kind in kinds.items() if kind == "open")

    def score(self, record: Record, prediction: str) -> dict[str, float]:
        if self._lookup(self.kinds, record) == "closed":
            return {"closed_accuracy": closed_exact_match(prediction, record.answer)}
        return {
            "open_exact_match": open_exact_match(prediction, record.answer),
            "open_recall": token_recall(prediction, record.answer),
        }

    def vote_key(self, record: Record, prediction: str) -> str:
        key = normalise_answer(prediction)
        if self._lookup(self.kinds, record) == "closed" and key.split()[:1] in (["yes"], ["no"]):
            return key.split()[0]
        return key

    def candidates(self, record: Record) -> tuple[str, ...]:
        """Open: the open vocabulary. Closed: yes/no when the QUESTION reads as a yes/no one
        (:func:`is_yes_no_question`), else the one closed vocabulary (yes, no and every closed
        test answer) — never decided from the query's own gold answer."""
        if self._lookup(self.kinds, record) == "open":
            return self.open_vocabulary
        question = self.questions.get(record.record_id, record.question)
        return YES_NO if is_yes_no_question(question) else self.closed_vocabulary


_YES_NO_OPENERS = frozenset(
    "is are was were do does did can could has have had will would should shall may might must".split()
)


def is_yes_no_question(question: str) -> bool:
    """The question's first line opens with an auxiliary verb and offers no ``or`` alternative
    (``Is there a fracture?`` yes; ``Is this an MRI or a CT?`` no)."""
    words = re.findall(r"[a-z']+", question.split("\n", 1)[0].casefold())
    return bool(words) and words[0] in _YES_NO_OPENERS and "or" not in words
