"""Tiny copies of each benchmark in its published layout (a few random images + annotations)."""

from __future__ import annotations

import json
import pickle
from pathlib import Path

import numpy as np
from PIL import Image

_RNG = np.random.default_rng(0)


def image(path: Path, size: int = 16) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(_RNG.integers(0, 256, (size, size, 3), dtype=np.uint8)).save(path)
    return path


def _json(path: Path, content) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(content))


def _ten(*answers: str) -> list[str]:
    return [answers[i % len(answers)] for i in range(10)]


def write_vizwiz(root: Path, n_train: int = 6, n_val: int = 3) -> Path:
    for split, count in (("train", n_train), ("val", n_val)):
        rows = []
        for i in range(count):
            name = f"VizWiz_{split}_{i:08d}.jpg"
            image(root / split / name)
            answers = _ten("Two", "2", "two dogs") if i % 2 else _ten("unanswerable")
            rows.append(
                {
                    "image": name,
                    "question": "What is this?",
                    "answers": [{"answer": a, "answer_confidence": "yes"} for a in answers],
                    "answer_type": "other",
                    "answerable": 1,
                }
            )
        _json(root / "Annotations" / f"{split}.json", rows)
    return root


def write_okvqa(root: Path, n_train: int = 5, n_val: int = 3) -> Path:
    for split, count in (("train2014", n_train), ("val2014", n_val)):
        questions, annotations = [], []
        for i in range(count):
            image_id, question_id = 100 + i, 1000 * (i + 1) + len(split)
            image(root / split / f"COCO_{split}_{image_id:012d}.jpg")
            questions.append(
                {"image_id": image_id, "question": "What sport is this?", "question_id": question_id}
            )
            answers = [
                {"answer_id": k + 1, "raw_answer": a, "answer_confidence": "yes", "answer": a}
                for k, a in enumerate(_ten("tennis", "tennis", "racket"))
            ]
            annotations.append({"image_id": image_id, "question_id": question_id, "answers": answers})
        _json(root / f"OpenEnded_mscoco_{split}_questions.json", {"questions": questions})
        _json(root / f"mscoco_{split}_annotations.json", {"annotations": annotations})
    return root


def write_flowers(root: Path, classes: int = 3, per_class: int = 6) -> Path:
    from scipy.io import savemat

    labels = np.repeat(np.arange(1, classes + 1), per_class)
    for number in range(1, len(labels) + 1):
        image(root / "jpg" / f"image_{number:05d}.jpg")
    savemat(root / "imagelabels.mat", {"labels": labels[None, :]})
    ids = np.arange(1, len(labels) + 1).reshape(classes, per_class)
    savemat(
        root / "setid.mat",
        {
            "trnid": ids[:, :2].ravel()[None],
            "valid": ids[:, 2:3].ravel()[None],
            "tstid": ids[:, 3:].ravel()[None],
        },
    )
    _json(root / "cat_to_name.json", {str(c): f"flower {chr(96 + c)}" for c in range(1, classes + 1)})
    return root


def write_cub(root: Path, classes: int = 3, per_class: int = 4) -> Path:
    base = root / "CUB_200_2011"
    images, labels, split, names = [], [], [], []
    for c in range(1, classes + 1):
        folder = f"{c:03d}.Bird_Number_{c}"
        names.append(f"{c} {folder}")
        for k in range(per_class):
            image_id = len(images) + 1
            image(base / "images" / folder / f"Bird_{image_id}.jpg")
            images.append(f"{image_id} {folder}/Bird_{image_id}.jpg")
            labels.append(f"{image_id} {c}")
            split.append(f"{image_id} {1 if k < per_class // 2 else 0}")
    for file, lines in (
        ("images.txt", images),
        ("image_class_labels.txt", labels),
        ("train_test_split.txt", split),
        ("classes.txt", names),
    ):
        (base / file).write_text("\n".join(lines) + "\n")
    return root


def write_dtd(root: Path, categories=("banded", "dotted", "striped"), per_class: int = 6) -> Path:
    base = root / "dtd"
    files = {"train1.txt": [], "val1.txt": [], "test1.txt": []}
    for category in categories:
        for k in range(per_class):
            relative = f"{category}/{category}_{k:04d}.jpg"
            image(base / "images" / relative)
            files[
                ["train1.txt", "train1.txt", "val1.txt", "val1.txt", "test1.txt", "test1.txt"][k % 6]
            ].append(relative)
    (base / "labels").mkdir(parents=True, exist_ok=True)
    for name, lines in files.items():
        (base / "labels" / name).write_text("\n".join(lines) + "\n")
    return root


def _medical_rows(count: int, start: int = 0):
    for i in range(start, start + count):
        closed = i % 2 == 0
        yield (
            i,
            ("Is there a fracture?", "yes" if i % 4 == 0 else "no") if closed else ("Which organ?", "liver"),
            closed,
        )


def write_vqa_rad(root: Path, n_train: int = 6, n_test: int = 4) -> Path:
    rows = []
    for i, (question, answer), closed in _medical_rows(n_train + n_test):
        name = f"synpic{i}.jpg"
        image(root / "VQA_RAD Image Folder" / name)
        rows.append(
            {
                "qid": i,
                "image_name": name,
                "question": question,
                "answer": answer,
                "answer_type": "CLOSED" if closed else "OPEN ",  # published files have stray spaces
                "phrase_type": "test_freeform" if i >= n_train else "freeform",
            }
        )
    _json(root / "VQA_RAD Dataset Public.json", rows)
    return root


def write_slake(root: Path, n_train: int = 6, n_test: int = 4) -> Path:
    base = root / "Slake1.0"
    for split, count in (("train", n_train), ("test", n_test)):
        rows = []
        for i, (question, answer), closed in _medical_rows(count):
            name = f"xmlab{i}/source.jpg"
            image(base / "imgs" / name)
            rows.append(
                {
                    "qid": i,
                    "img_name": name,
                    "question": question,
                    "answer": answer,
                    "answer_type": "CLOSED" if closed else "OPEN",
                    "q_lang": "en",
                }
            )
            rows.append(
                {
                    "qid": 1000 + i,
                    "img_name": name,
                    "question": "这是什么?",
                    "answer": "肝",
                    "answer_type": "OPEN",
                    "q_lang": "zh",
                }
            )
        _json(base / f"{split}.json", rows)
    return root


def write_pathvqa(root: Path, n_train: int = 6, n_test: int = 4) -> Path:
    base = root / "pvqa"
    for split, count in (("train", n_train), ("test", n_test)):
        rows = []
        for i, (question, answer), _ in _medical_rows(count):
            name = f"{split}_{i:04d}"
            image(base / "images" / split / f"{name}.jpg")
            rows.append({"image": name, "question": question, "answer": answer})
        (base / "qas" / split).mkdir(parents=True, exist_ok=True)
        (base / "qas" / split / f"{split}_qa.pkl").write_bytes(pickle.dumps(rows))
    return root


WRITERS = {
    "vizwiz": write_vizwiz,
    "ok-vqa": write_okvqa,
    "flowers102": write_flowers,
    "cub-200": write_cub,
    "dtd": write_dtd,
    "vqa-rad": write_vqa_rad,
    "slake": write_slake,
    "pathvqa": write_pathvqa,
}
