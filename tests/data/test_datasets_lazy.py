"""A saved ``datasets`` folder is read without decoding its images (issue 25.5): each image stays
a handle into the memory-mapped Arrow file until a chunk is prepared."""

from __future__ import annotations

import io
import pickle

import numpy as np
import pytest
from PIL import Image

from dpmtv.data.datasets_folder import DatasetImage
from dpmtv.data.records import load_records
from dpmtv.errors import RecordError

datasets = pytest.importorskip("datasets")

SIDE_PX = 128  # 48 KiB of pixels per image: a decoded record would carry them


def _images(count: int, seed: int = 0) -> list[Image.Image]:
    rng = np.random.default_rng(seed)
    return [
        Image.fromarray(rng.integers(0, 256, (SIDE_PX, SIDE_PX, 3), dtype=np.uint8)) for _ in range(count)
    ]


def _save(folder, columns: dict, image_feature) -> None:
    features = datasets.Features(
        {"image": image_feature, "question": datasets.Value("string"), "answer": datasets.Value("string")}
    )
    datasets.Dataset.from_dict(columns, features=features).save_to_disk(str(folder))


def test_records_hold_handles_not_pixels_and_decode_to_the_same_image(tmp_path):
    images = _images(16)
    _save(
        tmp_path / "ds",
        {"image": images, "question": ["q"] * 16, "answer": list("abcdefghijklmnop")},
        datasets.Image(),
    )
    records = load_records(tmp_path / "ds")
    assert all(isinstance(source, DatasetImage) for record in records for source in record.images)
    # Sixteen 128 px images are 786 KB of pixels; the records themselves stay a few hundred bytes each.
    assert len(pickle.dumps(records)) < 16 * 1_000
    for record, image in zip(records, images, strict=True):
        assert np.array_equal(np.asarray(record.load_images()[0]), np.asarray(image))


def test_handles_survive_pickling_into_a_fresh_cache(tmp_path):
    from dpmtv.data import datasets_folder

    _save(
        tmp_path / "ds", {"image": _images(2), "question": ["q"] * 2, "answer": ["a", "b"]}, datasets.Image()
    )
    records = load_records(tmp_path / "ds")
    expected = np.asarray(records[1].load_images()[0])
    datasets_folder._open_undecoded.cache_clear()  # as in another process
    (copy,) = pickle.loads(pickle.dumps([records[1]]))
    assert np.array_equal(np.asarray(copy.load_images()[0]), expected)


def test_a_list_of_images_per_row_keeps_its_order(tmp_path):
    first, second, third = _images(3, seed=1)
    columns = {"image": [[first, second], [third]], "question": ["q", "q"], "answer": ["a", "b"]}
    _save(tmp_path / "ds", columns, datasets.Sequence(datasets.Image()))
    two, one = load_records(tmp_path / "ds")
    assert [source.position for source in two.images] == [0, 1] and len(one.images) == 1
    decoded = [np.asarray(image) for image in two.load_images()]
    assert np.array_equal(decoded[0], np.asarray(first)) and np.array_equal(decoded[1], np.asarray(second))


def test_a_corrupt_image_names_the_row_and_field(tmp_path):
    good = io.BytesIO()
    _images(1)[0].save(good, format="PNG")
    cells = [{"bytes": good.getvalue(), "path": None}, {"bytes": b"not an image", "path": None}]
    _save(tmp_path / "ds", {"image": cells, "question": ["q", "q"], "answer": ["a", "b"]}, datasets.Image())
    with pytest.raises(RecordError, match=r"ds\[1\]: field 'image': inline bytes is not a readable image"):
        load_records(tmp_path / "ds")
