"""Public inputs that repeat private records are refused, with the count (exact copies only)."""

from __future__ import annotations

import json

import pytest
from PIL import Image

from dpmtv.data import load_records
from dpmtv.data.overlap import check_public_inputs, image_fingerprint, record_fingerprint
from dpmtv.errors import RecordError
from tests.conftest import write_records


def _rows(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


def _write(path, rows):
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def test_the_same_picture_saved_again_is_the_same_image(tmp_path):
    private = write_records(tmp_path / "p", 3)
    with Image.open(private.parent / "img" / "1.png") as image:
        image.save(tmp_path / "again.png", compress_level=0)
        image.save(tmp_path / "again.bmp")
        original = image_fingerprint(image)
    for name in ("again.png", "again.bmp"):
        with Image.open(tmp_path / name) as copy:
            assert image_fingerprint(copy) == original
    assert (tmp_path / "again.png").read_bytes() != (private.parent / "img" / "1.png").read_bytes()


def test_a_record_is_its_images_question_and_answer(tmp_path):
    private = write_records(tmp_path / "p", 3)
    rows = _rows(private)
    variants = [
        {**rows[0], "id": "other-id"},  # the id is not content: same record
        {**rows[0], "id": "v1", "answer": rows[0]["answer"] + "!"},
        {**rows[0], "id": "v2", "question": "Another question?"},
        {**rows[0], "id": "v3", "image": rows[1]["image"]},
    ]
    base = record_fingerprint(load_records(private)[0])
    found = [
        record_fingerprint(r) == base for r in load_records(_write(tmp_path / "p" / "v.jsonl", variants))
    ]
    assert found == [True, False, False, False]


def test_overlaps_are_counted_and_refused(tmp_path):
    private_file = write_records(tmp_path / "p", 6)
    private = load_records(private_file)
    public_file = write_records(tmp_path / "q", 4, seed=9)
    check_public_inputs(private, public_records={"--center": public_file})  # disjoint: accepted
    rows = _rows(public_file)
    mixed = _write(
        tmp_path / "p" / "mixed.jsonl",
        [
            *_rows(private_file)[:2],
            *[
                {**row, "id": f"public-{index}", "image": str(public_file.parent / row["image"])}
                for index, row in enumerate(rows)
            ],
        ],
    )
    with pytest.raises(RecordError, match=r"--center '.*mixed.jsonl': 2 of the 6 public records"):
        check_public_inputs(private, public_records={"--center": mixed})
    with pytest.raises(RecordError, match="image of 1 private record"):
        check_public_inputs(private, public_images={"--query": private_file.parent / "img" / "4.png"})
    check_public_inputs(private, public_images={"--query": public_file.parent / "img" / "0.png"})
