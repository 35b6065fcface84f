import csv
import json

import pytest
from PIL import Image

from dpmtv.data import load_records
from dpmtv.errors import RecordError
from tests.conftest import write_records


def test_jsonl_records_load_with_images_relative_to_the_file(tmp_path):
    path = write_records(tmp_path, 5)
    records = load_records(path)
    assert [r.record_id for r in records] == [f"rec-{i}" for i in range(5)]
    assert records[0].load_images()[0].size == (20, 20)
    assert records[2].answer == "thing 2"


def test_a_list_of_images_and_user_id(tmp_path):
    write_records(tmp_path, 2)
    (tmp_path / "r.jsonl").write_text(
        json.dumps({"image": ["img/0.png", "img/1.png"], "question": "q", "answer": "a", "user_id": "u7"})
        + "\n"
    )
    (record,) = load_records(tmp_path / "r.jsonl")
    assert len(record.load_images()) == 2 and record.user_id == "u7"


def test_csv_with_the_same_columns(tmp_path):
    write_records(tmp_path, 2)
    with open(tmp_path / "r.csv", "w", newline="") as handle:
        writer = csv.DictWriter(handle, ["id", "image", "question", "answer"])
        writer.writeheader()
        writer.writerow({"id": "a", "image": "img/0.png;img/1.png", "question": "q", "answer": "x"})
    (record,) = load_records(tmp_path / "r.csv")
    assert record.record_id == "a" and len(record.images) == 2


def test_datasets_saved_on_disk(tmp_path):
    datasets = pytest.importorskip("datasets")
    image = Image.new("RGB", (12, 12), (255, 0, 0))
    features = datasets.Features(
        {"image": datasets.Image(), "question": datasets.Value("string"), "answer": datasets.Value("string")}
    )
    dataset = datasets.Dataset.from_dict(
        {"image": [image, image], "question": ["q", "q"], "answer": ["a", "b"]}, features=features
    )
    dataset.save_to_disk(str(tmp_path / "ds"))
    records = load_records(tmp_path / "ds")
    assert [r.answer for r in records] == ["a", "b"]
    assert records[1].load_images()[0].getpixel((0, 0)) == (255, 0, 0)


def test_missing_field_names_record_and_field(tmp_path):
    write_records(tmp_path, 1)
    (tmp_path / "r.jsonl").write_text(json.dumps({"image": "img/0.png", "question": "q"}) + "\n")
    with pytest.raises(RecordError, match=r"r\.jsonl:1: missing field 'answer'"):
        load_records(tmp_path / "r.jsonl")


def test_corrupt_image_names_record_field_and_file(tmp_path):
    path = write_records(tmp_path, 3)
    (tmp_path / "img" / "1.png").write_bytes(b"not a png at all")
    with pytest.raises(
        RecordError, match=r"records\.jsonl:2: field 'image': file '.*1\.png' is not a readable image"
    ):
        load_records(path)


def test_missing_image_file(tmp_path):
    (tmp_path / "r.jsonl").write_text(
        json.dumps({"image": "nope.png", "question": "q", "answer": "a"}) + "\n"
    )
    with pytest.raises(RecordError, match="nope.png' does not exist"):
        load_records(tmp_path / "r.jsonl")


def test_empty_data_is_refused(tmp_path):
    (tmp_path / "r.jsonl").write_text("\n")
    with pytest.raises(RecordError, match="contains no records"):
        load_records(tmp_path / "r.jsonl")


def test_bad_json_line(tmp_path):
    (tmp_path / "r.jsonl").write_text("{oops\n")
    with pytest.raises(RecordError, match=r"r\.jsonl:1: not valid JSON"):
        load_records(tmp_path / "r.jsonl")


def test_duplicate_ids_are_refused(tmp_path):
    path = write_records(tmp_path, 2)
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    rows[1]["id"] = rows[0]["id"]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    with pytest.raises(RecordError, match="repeats the id"):
        load_records(path)


def test_queries_need_no_answer(tmp_path):
    write_records(tmp_path, 1)
    (tmp_path / "q.jsonl").write_text(json.dumps({"image": "img/0.png", "question": "q"}) + "\n")
    (query,) = load_records(tmp_path / "q.jsonl", require_answer=False)
    assert query.answer == ""


def test_unknown_format(tmp_path):
    (tmp_path / "r.txt").write_text("x")
    with pytest.raises(RecordError, match="unknown data format"):
        load_records(tmp_path / "r.txt")
