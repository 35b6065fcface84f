"""Flowers102, CUB-200-2011 and DTD as 2-way 1-shot episodes, scored by option letter.

One episode (one record) holds three images: one support image of each of two classes, labelled
(A) and (B) with their class names in the question, then a query image of one of the two
classes; the answer is its letter. Classes, supports, the query class (balanced) and the option
order are drawn with the split seed, training episodes from the published training images only
and query episodes from the published test images only. ``max_train`` / ``max_test`` set the
numbers of episodes (defaults 1000 and 200).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

from dpmtv.data.records import Record
from dpmtv.errors import RecordError
from dpmtv.eval.benchmarks.base import (
    OPTION_ANSWER,
    Benchmark,
    LoadOptions,
    finish,
    first_existing,
    read_json,
    require,
)
from dpmtv.eval.benchmarks.flower_names import FLOWER_NAMES
from dpmtv.eval.scorers import LETTERS, OptionLetterScorer

DEFAULT_TRAIN_EPISODES, DEFAULT_TEST_EPISODES = 1000, 200
#: Folders a Flowers102 copy may sit in under the root (torchvision: flowers-102/)
FLOWERS_FOLDERS = ("flowers-102", "flowers102", "oxford-102-flowers")
Pool = Mapping[str, Sequence[Path]]  # class name -> its images

FLOWERS_LAYOUT = """\
  ROOT/jpg/image_00001.jpg ... image_08189.jpg
  ROOT/imagelabels.mat   'labels': 1 x 8189, classes 1..102
  ROOT/setid.mat         'trnid', 'valid', 'tstid': 1-based image numbers
  ROOT/cat_to_name.json  optional {"1": "pink primrose", ...}; without it the shipped 102 names
  (ROOT may also hold these under flowers-102/ as torchvision downloads them, or flowers102/)"""

CUB_LAYOUT = """\
  ROOT/CUB_200_2011/images.txt               '<image_id> <path under images/>'
  ROOT/CUB_200_2011/image_class_labels.txt   '<image_id> <class_id>'
  ROOT/CUB_200_2011/classes.txt              '<class_id> 001.Black_footed_Albatross'
  ROOT/CUB_200_2011/train_test_split.txt     '<image_id> <1 = train, 0 = test>'
  ROOT/CUB_200_2011/images/001.Black_footed_Albatross/....jpg
  (ROOT may also be the CUB_200_2011 folder itself, or hold CUB_200_2011/CUB_200_2011/)"""

DTD_LAYOUT = """\
  ROOT/dtd/images/<category>/<category>_0001.jpg ...
  ROOT/dtd/labels/train1.txt, val1.txt, test1.txt   lines '<category>/<file>.jpg'
  (ROOT may also be the dtd folder itself, or hold dtd/dtd/ as torchvision downloads it;
   split 1 of the published 10)"""


def episodes(pool: Pool, count: int, *, seed: int, prefix: str, noun: str) -> tuple[list[Record], dict]:
    """``count`` 2-way 1-shot episodes from ``pool``; also returns each episode's option names."""
    classes = sorted(name for name, images in pool.items() if len(images) >= 2)
    if len(classes) < 2:
        raise RecordError(f"{prefix}: need at least 2 classes with >= 2 images each, found {len(classes)}")
    rng = np.random.default_rng(seed)
    records, options = [], {}
    for index in range(count):
        pair = [classes[int(i)] for i in rng.choice(len(classes), size=2, replace=False)]
        target = int(rng.integers(2))
        supports = [pool[name][int(rng.integers(len(pool[name])))] for name in pair]
        others = [image for image in pool[pair[target]] if image != supports[target]]
        query = others[int(rng.integers(len(others)))]
        record_id = f"{prefix}-episode-{index}"
        records.append(
            Record(
                record_id,
                (*supports, query),
                _question(pair, noun),
                LETTERS[target],
                where=f"{prefix} episode {index}",
                has_explicit_id=True,
            )
        )
        options[record_id] = tuple(pair)
    return records, options


def _question(pair: Sequence[str], noun: str) -> str:
    return (
        f"Image 1 shows (A) {pair[0]}. Image 2 shows (B) {pair[1]}. "
        f"Which {noun} does image 3 show?\n(A) {pair[0]}\n(B) {pair[1]}\n{OPTION_ANSWER}"
    )


def _benchmark(name: str, noun: str, pools: tuple[Pool, Pool], root: Path, layout: str, options) -> Benchmark:
    seed = options.split_seed
    n_train = options.max_train or DEFAULT_TRAIN_EPISODES
    n_test = options.max_test or DEFAULT_TEST_EPISODES
    train, _ = episodes(pools[0], n_train, seed=seed, prefix=f"{name}-train", noun=noun)
    test, names = episodes(pools[1], n_test, seed=seed + 1, prefix=f"{name}-test", noun=noun)
    return finish(
        name,
        train,
        test,
        lambda kept: OptionLetterScorer({r.record_id: names[r.record_id] for r in kept}),
        root=root,
        layout=layout,
        options=LoadOptions(split_seed=seed),
        notes=(f"2-way 1-shot episodes: {n_train} demonstration, {n_test} query episodes",),
    )


# ---- Flowers102 ------------------------------------------------------------------------------
def load_flowers102(root: Path, options: LoadOptions) -> Benchmark:
    from scipy.io import loadmat

    base = first_existing(root, FLOWERS_FOLDERS)

    def mat(file: str) -> dict:
        path = require(base / file, name="flowers102", root=root, layout=FLOWERS_LAYOUT)
        try:
            return loadmat(str(path))
        except (OSError, ValueError) as exc:
            raise RecordError(f"flowers102: '{path}' is not a readable .mat file ({exc})") from None

    require(base / "jpg", name="flowers102", root=root, layout=FLOWERS_LAYOUT)
    labels = np.asarray(_mat_field(mat("imagelabels.mat"), "labels", "imagelabels.mat")).ravel()
    split = mat("setid.mat")
    names = _flower_names(base, root)
    train_ids = np.concatenate([_mat_field(split, key, "setid.mat").ravel() for key in ("trnid", "valid")])
    test_ids = _mat_field(split, "tstid", "setid.mat").ravel()

    def pool(ids: np.ndarray) -> dict[str, list[Path]]:
        out: dict[str, list[Path]] = {}
        for image_number in ids.astype(int):
            label = int(labels[image_number - 1])
            out.setdefault(names.get(label, f"class {label}"), []).append(
                base / "jpg" / f"image_{image_number:05d}.jpg"
            )
        return out

    return _benchmark(
        "flowers102", "flower", (pool(train_ids), pool(test_ids)), root, FLOWERS_LAYOUT, options
    )


def _mat_field(content: dict, key: str, file: str) -> np.ndarray:
    if key not in content:
        raise RecordError(f"flowers102: '{file}' has no variable '{key}'. Expected layout:\n{FLOWERS_LAYOUT}")
    return np.asarray(content[key])


def _flower_names(base: Path, root: Path) -> dict[int, str]:
    """The copy's ``cat_to_name.json`` when it has one, else the shipped names."""
    path = base / "cat_to_name.json"
    if not path.exists():
        return dict(FLOWER_NAMES)
    content = read_json(path, name="flowers102", root=root, layout=FLOWERS_LAYOUT)
    return {int(key): str(value) for key, value in content.items()}


# ---- CUB-200-2011 ----------------------------------------------------------------------------
def load_cub200(root: Path, options: LoadOptions) -> Benchmark:
    base = first_existing(root, ["CUB_200_2011/CUB_200_2011", "CUB_200_2011"])

    def table(file: str) -> dict[str, str]:
        path = require(base / file, name="cub-200", root=root, layout=CUB_LAYOUT)
        rows = [
            line.split(maxsplit=1) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()
        ]
        if any(len(row) != 2 for row in rows):
            raise RecordError(
                f"cub-200: '{path}' must have two columns per line. Expected layout:\n{CUB_LAYOUT}"
            )
        return dict(rows)

    paths, labels, is_train = (
        table("images.txt"),
        table("image_class_labels.txt"),
        table("train_test_split.txt"),
    )
    classes = {key: value.split(".", 1)[-1].replace("_", " ") for key, value in table("classes.txt").items()}
    pools: tuple[dict, dict] = ({}, {})
    for image_id, relative in paths.items():
        class_id = labels.get(image_id, "").strip()
        if class_id not in classes or image_id not in is_train:
            raise RecordError(
                f"cub-200: image {image_id} of images.txt has no class in image_class_labels.txt / "
                f"classes.txt or no row in train_test_split.txt. Expected layout:\n{CUB_LAYOUT}"
            )
        split = 0 if is_train[image_id].strip() == "1" else 1
        pools[split].setdefault(classes[class_id], []).append(base / "images" / relative.strip())
    return _benchmark("cub-200", "bird", pools, root, CUB_LAYOUT, options)


# ---- DTD -------------------------------------------------------------------------------------
def load_dtd(root: Path, options: LoadOptions) -> Benchmark:
    base = first_existing(root, ["dtd/dtd", "dtd"])

    def pool(files: Sequence[str]) -> dict[str, list[Path]]:
        out: dict[str, list[Path]] = {}
        for file in files:
            path = require(base / "labels" / file, name="dtd", root=root, layout=DTD_LAYOUT)
            for line in path.read_text(encoding="utf-8").split():
                out.setdefault(line.split("/", 1)[0].replace("_", " "), []).append(base / "images" / line)
        return out

    require(base / "images", name="dtd", root=root, layout=DTD_LAYOUT)
    pools = (pool(["train1.txt", "val1.txt"]), pool(["test1.txt"]))
    return _benchmark("dtd", "texture", pools, root, DTD_LAYOUT, options)
