"""Medical VQA: VQA-RAD, SLAKE (English) and PathVQA; closed and open questions scored apart.

Closed questions: the published ``answer_type`` ``CLOSED`` (VQA-RAD, SLAKE), or a yes/no answer
(PathVQA, whose files carry no type). Everything else is open.

The published splits of VQA-RAD and PathVQA overlap: VQA-RAD's training rows repeat, and one also
appears in its test split; PathVQA's card notes duplicates too. Before anything else, each loader
drops the training rows whose (image, question, answer) — question case- and space-folded, answer
in the VQA normal form — occurs in the test split, then repeated training rows, and reports both
counts (and the repeated test rows, which are kept: they are the published queries).
"""

from __future__ import annotations

import pickle
from collections.abc import Iterable, Sequence
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
from dpmtv.eval.scorers import YES_NO, MedicalScorer, normalise_answer

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


def _medical(
    name: str, train, test, kinds: dict[str, str], root: Path, layout: str, options, *, dedupe: bool
) -> Benchmark:
    def make_scorer(kept):
        return MedicalScorer(
            {r.record_id: kinds[r.record_id] for r in kept},
            {r.record_id: r.answer for r in kept},
            {r.record_id: r.question for r in kept},
        )

    train, notes = drop_overlap_and_duplicates(train, test) if dedupe else (train, ())
    return finish(name, train, test, make_scorer, root=root, layout=layout, options=options, notes=notes)


def _row_key(record: Record) -> tuple[str, str, str]:
    image = Path(str(record.images[0])).name if record.images else ""
    question = " ".join(record.question.split("\n", 1)[0].casefold().split())
    return image, question, normalise_answer(record.answer)


def drop_overlap_and_duplicates(
    train: Sequence[Record], test: Sequence[Record]
) -> tuple[list[Record], tuple[str, ...]]:
    """Training rows minus those also in the test split and minus repeats (first one kept), with
    notes giving the counts (see the module docstring for the row identity)."""
    test_keys = [_row_key(r) for r in test]
    in_test, seen, kept = set(test_keys), set(), []
    overlap = repeated = 0
    for record in train:
        key = _row_key(record)
        if key in in_test:
            overlap += 1
        elif key in seen:
            repeated += 1
        else:
            seen.add(key)
            kept.append(record)
    notes = (
        f"dropped {overlap} training row(s) that also appear in the test split and "
        f"{repeated} repeated training row(s); {len(test_keys) - len(in_test)} repeated test row(s) kept",
    )
    return kept, notes


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
        return "closed" if normalise_answer(answer) in YES_NO else "open"
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
    return _medical("vqa-rad", train, test, kinds, root, VQA_RAD_LAYOUT, options, dedupe=True)


def load_slake(root: Path, options: LoadOptions) -> Benchmark:
    base = first_existing(root, ["Slake1.0", "Slake"])
    kinds: dict[str, str] = {}
    splits = [list(_slake_split(base, root, split, kinds)) for split in ("train", "test")]
    return _medical("slake", splits[0], splits[1], kinds, root, SLAKE_LAYOUT, options, dedupe=False)


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
    return _medical("pathvqa", splits[0], splits[1], kinds, root, PATHVQA_LAYOUT, options, dedupe=True)


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


def _string_dtype(spec, *args):
    """``numpy.dtype`` for string dtypes only (``'U7'``, ``'S3'``): what a numpy string scalar
    pickles with."""
    import numpy as np

    if not (isinstance(spec, str) and spec[:1] in ("U", "S")):
        raise RecordError(f"pathvqa: the .pkl file builds numpy dtype {spec!r}; only string dtypes are read")
    return np.dtype(spec, *args)


def _string_scalar(dtype, raw: bytes = b"") -> str:
    """What ``numpy.core.multiarray.scalar(dtype, raw)`` builds for a string dtype, decoded here
    from the raw bytes (numpy is never called with pickled arguments), as a plain ``str``."""
    import numpy as np

    if not isinstance(dtype, np.dtype) or dtype.kind not in ("U", "S") or not isinstance(raw, bytes):
        raise RecordError(
            f"pathvqa: the .pkl file builds a numpy scalar of dtype {dtype!r}; only strings are read"
        )
    if dtype.kind == "S":
        return raw.rstrip(b"\0").decode("utf-8", "replace")
    return raw.decode("utf-32-be" if dtype.byteorder == ">" else "utf-32-le").rstrip("\0")


#: The only globals a PathVQA pickle may name: numpy string scalars and the codec that pickles
#: their raw bytes under protocol 2. Each is wrapped so it builds strings and nothing else.
_ALLOWED_GLOBALS = {
    ("numpy", "dtype"): _string_dtype,
    ("numpy.core.multiarray", "scalar"): _string_scalar,
    ("numpy._core.multiarray", "scalar"): _string_scalar,
    ("_codecs", "encode"): None,  # resolved below: a pure str -> bytes function
}


class _PlainUnpickler(pickle.Unpickler):
    """Reads built-in containers and scalars plus numpy STRING scalars (PathVQA's files hold
    ``numpy.str_`` values): any other class or function reference is refused, so a tampered
    .pkl cannot run code."""

    def find_class(self, module: str, name: str):
        if (module, name) not in _ALLOWED_GLOBALS:
            raise RecordError(
                f"pathvqa: the .pkl file references {module}.{name}; only plain lists/dicts and numpy "
                "strings are read"
            )
        if (module, name) == ("_codecs", "encode"):
            import codecs

            return codecs.encode
        return _ALLOWED_GLOBALS[(module, name)]


def _load_plain_pickle(path: Path) -> list:
    try:
        with path.open("rb") as handle:
            rows = _PlainUnpickler(handle).load()
    except (pickle.UnpicklingError, EOFError, OSError) as exc:
        raise RecordError(f"pathvqa: '{path}' is not a readable pickle ({exc})") from None
    if not isinstance(rows, list):
        raise RecordError(f"pathvqa: '{path}' must hold a list of question dicts, got {type(rows).__name__}")
    return rows
