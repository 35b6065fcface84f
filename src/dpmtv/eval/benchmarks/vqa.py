"""VizWiz-VQA and OK-VQA from their published annotation files (VQA accuracy, 10 answers).

The demonstration answer of a question is its most frequent annotator answer in the VQA normal
form (empty answers count only when every annotator left it empty); the queries are scored
against all of them, an empty annotator answer included (it is a reference the evaluators keep).
VizWiz is scored with the VizWiz evaluator's rule, OK-VQA with the official VQA one (see
:func:`dpmtv.eval.scorers.vqa_accuracy`). Test-split answers are unpublished for both, so the
published validation split serves as the queries and the training split as the (private) pool.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from dpmtv.data.records import Record
from dpmtv.errors import RecordError
from dpmtv.eval.benchmarks.base import (
    SHORT_ANSWER,
    Benchmark,
    LoadOptions,
    field_of,
    finish,
    most_common_normalised,
    read_json,
)
from dpmtv.eval.scorers import VQAScorer

VIZWIZ_LAYOUT = """\
  ROOT/Annotations/train.json   [{"image": "VizWiz_train_00000000.jpg", "question": "...",
  ROOT/Annotations/val.json       "answers": [{"answer": "...", "answer_confidence": "yes"}, ...x10],
                                  "answer_type": "...", "answerable": 1}, ...]
  ROOT/train/VizWiz_train_00000000.jpg ...
  ROOT/val/VizWiz_val_00000000.jpg ..."""

OKVQA_LAYOUT = """\
  ROOT/OpenEnded_mscoco_train2014_questions.json  {"questions": [{"image_id", "question", "question_id"}]}
  ROOT/OpenEnded_mscoco_val2014_questions.json
  ROOT/mscoco_train2014_annotations.json  {"annotations": [{"question_id", "image_id",
  ROOT/mscoco_val2014_annotations.json      "answers": [{"answer", "raw_answer", ...}, ...x10]}]}
  ROOT/train2014/COCO_train2014_000000000009.jpg ...
  ROOT/val2014/COCO_val2014_000000000042.jpg ..."""


def load_vizwiz(root: Path, options: LoadOptions) -> Benchmark:
    train, _ = _vizwiz_split(root, "train")
    test, references = _vizwiz_split(root, "val")
    return finish(
        "vizwiz",
        train,
        test,
        lambda kept: VQAScorer({r.record_id: references[r.record_id] for r in kept}, rule="vizwiz"),
        root=root,
        layout=VIZWIZ_LAYOUT,
        options=options,
        notes=("queries: the published val split (test answers are not public)",),
    )


def _vizwiz_split(root: Path, split: str) -> tuple[list[Record], dict[str, tuple[str, ...]]]:
    path = root / "Annotations" / f"{split}.json"
    rows = read_json(path, name="vizwiz", root=root, layout=VIZWIZ_LAYOUT)
    if not isinstance(rows, list):
        raise RecordError(f"vizwiz: '{path}' must hold a JSON list of questions, got {type(rows).__name__}")
    records, references = [], {}
    for index, row in enumerate(rows):
        where = f"{path}[{index}]"
        image = str(field_of(row, "image", where))
        answers = _answers(field_of(row, "answers", where), where)
        record_id = f"vizwiz-{Path(image).stem}"
        records.append(_record(record_id, root / split / image, row, answers, where))
        references[record_id] = answers
    return records, references


def load_okvqa(root: Path, options: LoadOptions) -> Benchmark:
    train, _ = _okvqa_split(root, "train2014")
    test, references = _okvqa_split(root, "val2014")
    return finish(
        "ok-vqa",
        train,
        test,
        lambda kept: VQAScorer({r.record_id: references[r.record_id] for r in kept}, rule="vqa"),
        root=root,
        layout=OKVQA_LAYOUT,
        options=options,
        notes=("queries: the published val2014 split",),
    )


def _okvqa_split(root: Path, split: str) -> tuple[list[Record], dict[str, tuple[str, ...]]]:
    questions_path = root / f"OpenEnded_mscoco_{split}_questions.json"
    annotations_path = root / f"mscoco_{split}_annotations.json"
    questions = _list_under(questions_path, "questions")
    annotations = {
        field_of(a, "question_id", f"{annotations_path}[{i}]"): a
        for i, a in enumerate(_list_under(annotations_path, "annotations"))
    }
    records, references = [], {}
    for index, row in enumerate(questions):
        where = f"{questions_path}[{index}]"
        question_id = field_of(row, "question_id", where)
        if question_id not in annotations:
            raise RecordError(f"{where}: question_id {question_id} has no entry in '{annotations_path}'")
        answers = _answers(field_of(annotations[question_id], "answers", where), where)
        image = root / split / f"COCO_{split}_{int(field_of(row, 'image_id', where)):012d}.jpg"
        record_id = f"okvqa-{question_id}"
        records.append(_record(record_id, image, row, answers, where))
        references[record_id] = answers
    return records, references


def _list_under(path: Path, key: str) -> list:
    content = read_json(path, name="ok-vqa", root=path.parent, layout=OKVQA_LAYOUT)
    if not isinstance(content, dict) or not isinstance(content.get(key), list):
        raise RecordError(f"ok-vqa: '{path}' must be a JSON object with a '{key}' list")
    return content[key]


def _answers(raw: object, where: str) -> tuple[str, ...]:
    """The annotators' answers; an empty one (``""``) is kept: the evaluators score against it."""
    if not isinstance(raw, list) or not raw:
        raise RecordError(f"{where}: field 'answers' must be a non-empty list")
    out = []
    for index, entry in enumerate(raw):
        if not isinstance(entry, dict) or not isinstance(entry.get("answer"), str):
            raise RecordError(f"{where}.answers[{index}]: missing field 'answer' (a string)")
        out.append(entry["answer"])
    return tuple(out)


def _record(record_id: str, image: Path, row: dict, answers: Sequence[str], where: str) -> Record:
    question = str(field_of(row, "question", where)).strip()
    return Record(
        record_id=record_id,
        images=(image,),
        question=f"{question}\n{SHORT_ANSWER}",
        answer=most_common_normalised(answers),
        where=where,
        has_explicit_id=True,
    )
