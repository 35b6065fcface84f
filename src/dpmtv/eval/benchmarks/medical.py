"""Medical VQA: VQA-RAD, SLAKE (English) and PathVQA; closed and open questions scored apart.

Closed questions: the published ``answer_type`` ``CLOSED`` (VQA-RAD, SLAKE), or a yes/no answer
(PathVQA, whose files carry no type). Everything else is open.
"""

from __future__ import annotations

import pickle
from collections.abc import Iterable
from pathlib import Path

from dpmtv.data.records import Record
from dpmtv.errors import RecordError
from dpmtv.eval.benchmarks.base import (
    SHORT_ANSWER,
    Benchmark,
    LoadOptions,
    field_of,
    finish,
    first_existing,
    read_json,
    require,
)
from dpmtv.eval.scorers import YES_NO, MedicalScorer, normalize_answer

VQA_RAD_LAYOUT = """\
  ROOT/VQA_RAD Dataset Public.json   [{"qid", "image_name", "question", "answer",
                                       "answer_type": "CLOSED"|"OPEN",
                                       "phrase_type": "freeform"|"para"|"test_freeform"|"test_para"}, ...]
  ROOT/VQA_RAD Image Folder/synpic12345.jpg ...
  (queries: phrase_type test_*; demonstrations: the rest)"""

SLAKE_LAYOUT = """\
  ROOT/Slake1.0/train.json, test.json   [{"qid", "img_name": "xmlab0/source.jpg", "question",
                                        "answer", "answer_type": "CLOSED"|"OPEN", "q_lang": "en"}, ...]
  ROOT/Slake1.0/imgs/xmlab0/source.jpg ...
  (ROOT may also be the Slake1.0 folder itself; English questions only)"""

PATHVQA_LAYOUT = """\
  ROOT/pvqa/qas/train/train_qa.pkl   pickled list of {"image": "train_0422", "question", "answer"}
  ROOT/pvqa/qas/test/test_qa.pkl
  ROOT/pvqa/images/train/train_0422.jpg, ROOT/pvqa/images/test/test_0001.jpg ...
  (ROOT may also be the pvqa folder itself; closed = yes/no answers)"""


def _medical(name: str, train, test, kinds: dict[str, str], root: Path, layout: str, options) -> Benchmark:
    def make_scorer(kept):
        return MedicalScorer(
            {r.record_id: kinds[r.record_id] for r in kept}, {r.record_id: r.answer for r in kept}
        )

    return finish(name, train, test, make_scorer, root=root, layout=layout, options=options)


def _record(record_id: str, image: Path, question: object, answer: object, where: str) -> Record:
    return Record(
        record_id,
        (image,),
        f"{str(question).strip()}\n{SHORT_ANSWER}",
        str(answer).strip(),
        where=where,
        has_explicit_id=True,
    )


def _kind(answer_type: object, answer: str) -> str:
    if answer_type is None:
        return "closed" if normalize_answer(answer) in YES_NO else "open"
    return "closed" if str(answer_type).strip().upper() == "CLOSED" else "open"


def load_vqa_rad(root: Path, options: LoadOptions) -> Benchmark:
    path = root / "VQA_RAD Dataset Public.json"
    rows = read_json(path, name="vqa-rad", root=root, layout=VQA_RAD_LAYOUT)
    if not isinstance(rows, list):
        raise RecordError(f"vqa-rad: '{path}' must hold a JSON list, got {type(rows).__name__}")
    train, test, kinds = [], [], {}
    for index, row in enumerate(rows):
        where = f"{path}[{index}]"
        record = _record(
            f"vqa-rad-{index}",
            root / "VQA_RAD Image Folder" / str(field_of(row, "image_name", where)),
            field_of(row, "question", where),
            field_of(row, "answer", where),
            where,
        )
        kinds[record.record_id] = _kind(field_of(row, "answer_type", where), record.answer)
        is_test = str(row.get("phrase_type", "")).startswith("test")
        (test if is_test else train).append(record)
    return _medical("vqa-rad", train, test, kinds, root, VQA_RAD_LAYOUT, options)


def load_slake(root: Path, options: LoadOptions) -> Benchmark:
    base = first_existing(root, ["Slake1.0", "Slake"])
    kinds: dict[str, str] = {}
    splits = [list(_slake_split(base, root, split, kinds)) for split in ("train", "test")]
    return _medical("slake", splits[0], splits[1], kinds, root, SLAKE_LAYOUT, options)


def _slake_split(base: Path, root: Path, split: str, kinds: dict[str, str]) -> Iterable[Record]:
    path = base / f"{split}.json"
    rows = read_json(path, name="slake", root=root, layout=SLAKE_LAYOUT)
    if not isinstance(rows, list):
        raise RecordError(f"slake: '{path}' must hold a JSON list, got {type(rows).__name__}")
    for index, row in enumerate(rows):
        where = f"{path}[{index}]"
        field_of(row, "question", where)  # refuses a row that is not an object
        if row.get("q_lang", "en") != "en":
            continue
        record = _record(
            f"slake-{split}-{index}",
            base / "imgs" / str(field_of(row, "img_name", where)),
            field_of(row, "question", where),
            field_of(row, "answer", where),
            where,
        )
        kinds[record.record_id] = _kind(field_of(row, "answer_type", where), record.answer)
        yield record


def load_pathvqa(root: Path, options: LoadOptions) -> Benchmark:
    base = first_existing(root, ["pvqa"])
    kinds: dict[str, str] = {}
    splits = [list(_pathvqa_split(base, root, split, kinds)) for split in ("train", "test")]
    return _medical("pathvqa", splits[0], splits[1], kinds, root, PATHVQA_LAYOUT, options)


def _pathvqa_split(base: Path, root: Path, split: str, kinds: dict[str, str]) -> Iterable[Record]:
    path = require(base / "qas" / split / f"{split}_qa.pkl", name="pathvqa", root=root, layout=PATHVQA_LAYOUT)
    rows = _load_plain_pickle(path)
    for index, row in enumerate(rows):
        where = f"{path}[{index}]"
        record = _record(
            f"pathvqa-{split}-{index}",
            base / "images" / split / f"{field_of(row, 'image', where)}.jpg",
            field_of(row, "question", where),
            field_of(row, "answer", where),
            where,
        )
        kinds[record.record_id] = _kind(None, record.answer)
        yield record


class _PlainUnpickler(pickle.Unpickler):
    """Reads only built-in containers and scalars: any class or function reference is refused,
    so a tampered .pkl cannot run code."""

    def find_class(self, module: str, name: str):
        raise RecordError(
            f"pathvqa: the .pkl file references {module}.{name}; only plain lists/dicts are read"
        )


def _load_plain_pickle(path: Path) -> list:
    try:
        with path.open("rb") as handle:
            rows = _PlainUnpickler(handle).load()
    except (pickle.UnpicklingError, EOFError, OSError) as exc:
        raise RecordError(f"pathvqa: '{path}' is not a readable pickle ({exc})") from None
    if not isinstance(rows, list):
        raise RecordError(f"pathvqa: '{path}' must hold a list of question dicts, got {type(rows).__name__}")
    return rows
