"""Fixed public shapes: private chunks that share a forward pass are still each a function of their
own records (dpmtv.forward.fixed_shapes, docs/design.md §10).

Every chunk prompt is padded to the public budget and takes the row its chunk id assigns in a pass
of a public number of rows, dummy rows in the empty slots. The checks are bitwise, in float32 and
bfloat16, on the embedded model and the tiny LLaVA, Gemma 3, PaliGemma and SmolVLM: the rows of the
other chunks of a pass do not move when one chunk grows past the budget (cut to fewer
demonstrations, so it runs alone) or has a record replaced (it stays in the pass).
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch
from PIL import Image

from dpmtv.data.prompts import chunk_prompt
from dpmtv.data.records import Record
from dpmtv.forward.prompt_budget import prompt_length
from dpmtv.heads import parse_head_spec
from dpmtv.models.loading import load_model
from dpmtv.pipeline.build import BuildSettings
from dpmtv.pipeline.private_batching import fixed_shape_of, resolve_private_batch_size
from dpmtv.pipeline.tasks import ChunkJob, ClippedRows, iter_clipped_chunks
from dpmtv.privacy import Partition, parse_l2_clip_norms
from dpmtv.privacy.partition import SparseChunks
from tests.conftest import TEST_DEVICE

SHOTS, NUM_CHUNKS, ROWS = 3, 4, 4  # every chunk in one pass of 4 rows
LONG_CHUNK, CHANGED_CHUNK = 0, 2
UNCHANGED = [c for c in range(NUM_CHUNKS) if c not in (LONG_CHUNK, CHANGED_CHUNK)]
FAMILIES = ["embedded", "llava", "gemma3", "paligemma", "smolvlm"]


def _image(seed: int, size: tuple[int, int] = (20, 20)) -> Image.Image:
    pixels = np.random.default_rng(seed).integers(0, 256, (size[1], size[0], 3), dtype=np.uint8)
    return Image.fromarray(pixels)


def _records(words: list[str], *, lengthen: bool = False, replace: bool = False) -> list[Record]:
    """``SHOTS`` records per chunk. ``lengthen``: chunk ``LONG_CHUNK``'s first record gets a
    question and answer far past the budget; ``replace``: a record of ``CHANGED_CHUNK`` gets
    another image (of another size) and a longer answer (its chunk becomes the pass's longest
    prompt, still within the budget: with padding to the longest, the other rows would move)."""
    records = []
    for index in range(SHOTS * NUM_CHUNKS):
        answer, question, image = words[index % len(words)], "What is shown?", _image(index)
        if lengthen and index == LONG_CHUNK * SHOTS:
            question, answer = question * 8, " ".join(words * 8)
        if replace and index == CHANGED_CHUNK * SHOTS + 1:
            answer, image = " ".join([words[(index + 1) % len(words)]] * 3), _image(10_000 + index, (36, 24))
        records.append(Record(f"r{index}", (image,), question, answer, where=f"record {index}"))
    return records


def _partition(chunk_ids=range(NUM_CHUNKS)) -> Partition:
    chunks = {j: np.arange(j * SHOTS, (j + 1) * SHOTS, dtype=np.int64) for j in chunk_ids}
    return Partition(chunks=SparseChunks(chunks, num_chunks=NUM_CHUNKS), num_unused=0)


def _settings(budget: int, rows: int | None = ROWS) -> BuildSettings:
    return BuildSettings(
        epsilon=1.0,
        delta=1e-5,
        l2_clip_norm=(1e6,),
        shots_per_chunk=SHOTS,
        progress=False,
        max_prompt_tokens=budget,
        private_batch_size=rows,
        prepare_workers=0,
    )


def _budget(loaded, words) -> int:
    """A budget a few tokens above every unchanged chunk prompt (the long one does not fit)."""
    records = _records(words, replace=True)
    lengths = [
        prompt_length(
            loaded.adapter,
            chunk_prompt(records[c * SHOTS : (c + 1) * SHOTS], query="record", query_question=""),
        )
        for c in range(NUM_CHUNKS)
    ]
    return max(lengths) + 5


def _chunk_rows(loaded, records, settings, partition=None) -> list[dict[int, np.ndarray]]:
    """Each non-empty chunk's clipped vector per layer, with the pass sizes the model saw."""
    heads = parse_head_spec("all", loaded.adapter.geometry)
    dims = {layer: len(heads.heads_in(layer)) * loaded.adapter.geometry.head_dim for layer in heads.layers}
    reference = {layer: np.zeros(dim) for layer, dim in dims.items()}
    clip_norms = parse_l2_clip_norms([1e6], heads.layers)
    chunks = iter_clipped_chunks(
        loaded, records, partition or _partition(), heads, settings, reference, clip_norms
    )
    return list(chunks)


class _PassSizes:
    """Rows of every forward pass of the model (a forward pre-hook on the real module)."""

    def __init__(self, model: torch.nn.Module):
        self.sizes: list[int] = []
        self._handle = model.register_forward_pre_hook(self._record, with_kwargs=True)

    def _record(self, module, args, kwargs):
        self.sizes.append(int(kwargs["input_ids"].shape[0]))

    def close(self) -> None:
        self._handle.remove()


@pytest.fixture(scope="module", params=FAMILIES)
def family_path(request, tiny_checkpoint):
    if request.param == "embedded":
        return "embedded", ["red", "green", "blue", "yellow"]
    path = tiny_checkpoint(request.param)
    return str(path), ["thing", "other", "cat"]


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_other_chunks_rows_of_a_fixed_shape_pass_are_bitwise_unchanged(family_path, dtype):
    path, words = family_path
    loaded = load_model(path, dtype=dtype, device=TEST_DEVICE)
    settings = _settings(_budget(loaded, words))
    assert resolve_private_batch_size(loaded.adapter, settings) == ROWS  # the family allows it
    passes = _PassSizes(loaded.model)
    try:
        before = _chunk_rows(loaded, _records(words), settings)
        assert passes.sizes == [ROWS]  # one pass of every chunk, no dummy-free shortcut
        passes.sizes.clear()
        after = _chunk_rows(loaded, _records(words, lengthen=True, replace=True), settings)
        assert sorted(passes.sizes) == [1, ROWS]  # the cut chunk (fewer images) ran alone
    finally:
        passes.close()
    for layer in before[0]:
        assert not np.array_equal(before[LONG_CHUNK][layer], after[LONG_CHUNK][layer])
        assert not np.array_equal(before[CHANGED_CHUNK][layer], after[CHANGED_CHUNK][layer])
        for chunk in UNCHANGED:
            np.testing.assert_array_equal(after[chunk][layer], before[chunk][layer], err_msg=f"chunk {chunk}")


@pytest.fixture(scope="module")
def embedded():
    return load_model("embedded", device=TEST_DEVICE), ["red", "green", "blue", "yellow"]


def test_dummy_rows_are_never_returned_nor_summed(embedded):
    """Chunks 1 and 2 empty: their slots hold dummy rows, which yield nothing — two rows come back,
    bitwise those of the same chunks in a full pass (each placed by its chunk id)."""
    loaded, words = embedded
    records, settings = _records(words), _settings(_budget(embedded[0], words))
    full = _chunk_rows(loaded, records, settings)
    sparse = _chunk_rows(loaded, records, settings, _partition([0, 3]))
    assert len(sparse) == 2
    for layer in full[0]:
        np.testing.assert_array_equal(sparse[0][layer], full[0][layer])
        np.testing.assert_array_equal(sparse[1][layer], full[3][layer])
    heads = parse_head_spec("all", loaded.adapter.geometry)
    reference = {layer: np.zeros(values.shape[1]) for layer, values in full[0].items()}
    job = ChunkJob(heads, settings, reference, parse_l2_clip_norms([1e6], heads.layers))
    rows = ClippedRows(job).run(loaded, records, _partition([0, 3]), progress=False)
    expected = np.concatenate(
        [np.concatenate([full[c][layer] for layer in heads.layers], axis=1) for c in (0, 3)]
    )
    np.testing.assert_array_equal(rows, expected)


def test_a_query_past_the_budget_gives_a_zero_row_and_moves_no_other_row(tiny_llava):
    """(The embedded model's prompts show no question, so the tiny LLaVA's are made long.)"""
    loaded, words = tiny_llava, ["thing", "other", "cat"]
    budget = _budget(loaded, words)
    records, long = _records(words), _records(words, lengthen=True)
    query = long[LONG_CHUNK * SHOTS + SHOTS - 1]
    long[LONG_CHUNK * SHOTS + SHOTS - 1] = dataclasses.replace(query, question=query.question * 40)
    before = _chunk_rows(loaded, records, _settings(budget))
    after = _chunk_rows(loaded, long, _settings(budget))
    for layer in before[0]:
        assert not after[LONG_CHUNK][layer].any()
        for chunk in range(1, NUM_CHUNKS):
            np.testing.assert_array_equal(after[chunk][layer], before[chunk][layer])


def test_fixed_shapes_need_a_family_that_allows_them_and_a_dummy_that_fits(embedded, tiny_checkpoint):
    loaded, words = embedded
    budget = _budget(loaded, words)
    assert resolve_private_batch_size(loaded.adapter, _settings(budget, rows=None)) == 16  # default
    assert resolve_private_batch_size(loaded.adapter, _settings(1000, rows=None)) == 8  # <= 8192 tokens
    assert resolve_private_batch_size(loaded.adapter, _settings(budget, rows=1)) == 1
    no_budget = dataclasses.replace(_settings(budget, rows=None), max_prompt_tokens=None)
    assert resolve_private_batch_size(loaded.adapter, no_budget) == 1  # padding to the position limit
    assert resolve_private_batch_size(loaded.adapter, _settings(8, rows=4)) == 1  # the dummy needs more
    assert fixed_shape_of(loaded.adapter, _settings(8, rows=4)) is None
    qwen = load_model(tiny_checkpoint("qwen2_vl"), device=TEST_DEVICE)
    assert resolve_private_batch_size(qwen.adapter, _settings(4096, rows=4)) == 1  # sizes images by content


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("source", ["embedded", "tiny-llava"])
def test_other_chunks_vote_scores_in_a_fixed_shape_pass_are_bitwise_unchanged(source, dtype, tiny_llava_path):
    """Private selection's votes: the capture pass is shared at fixed shapes, the backward pass is
    each chunk's own; other chunks' head scores stay bitwise the same."""
    from dpmtv.selection.private import chunk_head_scores

    path, words = ("embedded", ["red", "green", "blue", "yellow"])
    if source == "tiny-llava":
        path, words = str(tiny_llava_path), ["thing", "other", "cat"]
    loaded = load_model(path, dtype=dtype, device=TEST_DEVICE)
    budget = _budget(loaded, words)

    def scores(records):
        chunks = [records[c * SHOTS : (c + 1) * SHOTS] for c in range(NUM_CHUNKS)]
        found = chunk_head_scores(
            loaded, chunks, max_prompt_tokens=budget, progress=False, prepare_workers=0,
            private_batch_size=ROWS, shots_per_chunk=SHOTS,
        )  # fmt: skip
        return [s.numpy() for s in found]

    passes = _PassSizes(loaded.model)
    try:
        before = scores(_records(words))
        assert ROWS in passes.sizes  # the capture pass was shared
        after = scores(_records(words, lengthen=True, replace=True))
    finally:
        passes.close()
    assert not np.array_equal(before[CHANGED_CHUNK], after[CHANGED_CHUNK])
    for chunk in UNCHANGED:
        np.testing.assert_array_equal(after[chunk], before[chunk], err_msg=f"chunk {chunk}")


def _rows_of(values: list[list[int]]) -> list[dict[str, torch.Tensor]]:
    return [
        {"input_ids": torch.tensor([v]), "attention_mask": torch.ones(1, len(v), dtype=torch.long)}
        for v in values
    ]


def test_a_pass_that_raises_is_rerun_per_chunk_among_dummies():
    """Rule 4 (the scheduling alone, with a plain function as the forward pass): only the chunk
    whose own pass raises is dropped; the others get their rows; a chunk of another shape runs
    alone; dummy rows come back for no chunk."""
    from dpmtv.forward.fixed_shapes import rows_by_slot

    passes: list[list[list[int]]] = []

    def forward(inputs):
        ids = inputs["input_ids"]
        passes.append(ids.tolist())
        if (ids == 99).any():
            raise ValueError("this chunk's records break the model")
        return {0: ids.double().numpy() * 2}

    dummy = _rows_of([[0, 0]])[0]
    inputs = _rows_of([[1, 2], [99, 3], [4, 5, 6], [7, 8]])
    got = list(rows_by_slot(forward, [*inputs, None], [0, 1, 2, 5, 6], rows=4, dummy=dummy))
    assert got[1] is None and got[4] is None  # raised alone; dropped before (None inputs)
    np.testing.assert_array_equal(got[0][0], [[2, 4]])
    np.testing.assert_array_equal(got[2][0], [[8, 10, 12]])  # another shape: its own pass
    np.testing.assert_array_equal(got[3][0], [[14, 16]])  # slot 5: row 1 of the second pass
    assert passes[0] == [[4, 5, 6]]  # the odd shape first, alone
    assert passes[1] == [[1, 2], [99, 3], [0, 0], [0, 0]]  # the shared pass raised ...
    assert passes[2:4] == [[[1, 2], [0, 0], [0, 0], [0, 0]], [[0, 0], [99, 3], [0, 0], [0, 0]]]
    assert passes[4] == [[0, 0], [7, 8], [0, 0], [0, 0]]  # ... each chunk again among dummies


def test_a_missing_deterministic_kernel_stops_the_pass_with_what_to_do():
    from dpmtv.errors import ParameterError
    from dpmtv.forward.fixed_shapes import rows_by_slot

    def forward(inputs):
        raise RuntimeError("index_add_cuda_ does not have a deterministic implementation")

    dummy = _rows_of([[0, 0]])[0]
    with pytest.raises(ParameterError, match="--private-batch-size 1"):
        list(rows_by_slot(forward, _rows_of([[1, 2]]), [0], rows=2, dummy=dummy))
    with pytest.raises(ParameterError, match="slots must increase"):
        list(
            rows_by_slot(
                lambda x: {0: x["input_ids"].double()},
                _rows_of([[1, 2], [3, 4]]),
                [1, 1],
                rows=2,
                dummy=dummy,
            )
        )
