"""Every private forward pass computes a chunk as a function of that chunk alone.

A chunk's vector (release) and its head scores (private selection votes) must not move when
another chunk changes: neighbouring datasets differ in one record, and the sensitivity bound
assumes that every other chunk's contribution is exactly the same. Batching breaks this (a longer
record changes the padding, hence the numerics, of every chunk in its batch), so the check is
bitwise, in float32 and bfloat16, on the embedded model and a tiny HF LLaVA.
"""

from __future__ import annotations

import numpy as np
import pytest
from PIL import Image

from dpmtv.data.prompts import Prompt, chunk_prompt, zero_shot
from dpmtv.data.records import Record
from dpmtv.eval.dp_icl import run_vote_forward
from dpmtv.forward.extract import extract_selected_heads
from dpmtv.forward.prompt_budget import prompt_length
from dpmtv.heads import parse_head_spec
from dpmtv.models.loading import load_model
from dpmtv.pipeline.build import BuildSettings
from dpmtv.pipeline.tasks import iter_clipped_chunks
from dpmtv.privacy import Partition, parse_l2_clip_norms
from dpmtv.selection.private import chunk_head_scores
from tests.conftest import TEST_DEVICE

SHOTS, NUM_CHUNKS = 3, 4  # the old batch size 4 put every chunk in one batch
LONG_CHUNK, CHANGED_CHUNK = 0, 2  # one record made longer, another chunk's record replaced
UNCHANGED = [c for c in range(NUM_CHUNKS) if c not in (LONG_CHUNK, CHANGED_CHUNK)]


def _image(seed: int, size: int = 20) -> Image.Image:
    pixels = np.random.default_rng(seed).integers(0, 256, (size, size, 3), dtype=np.uint8)
    return Image.fromarray(pixels)


def _records(answer_words: list[str], *, lengthen: bool, replace: bool) -> list[Record]:
    """``SHOTS`` records per chunk, in chunk order. ``lengthen``: the first record of chunk
    ``LONG_CHUNK`` gets a much longer question and answer (more tokens for every family);
    ``replace``: a record of chunk ``CHANGED_CHUNK`` gets another image and answer."""
    records = []
    for index in range(SHOTS * NUM_CHUNKS):
        answer, question, seed = answer_words[index % len(answer_words)], "What is shown?", index
        if lengthen and index == LONG_CHUNK * SHOTS:
            question, answer = question * 6, " ".join(answer_words * 6)
        if replace and index == CHANGED_CHUNK * SHOTS + 1:
            answer, seed = answer_words[(index + 1) % len(answer_words)], 10_000 + index
        records.append(Record(f"r{index}", (_image(seed),), question, answer, where=f"record {index}"))
    return records


def _partition() -> Partition:
    return Partition(
        chunks=tuple(np.arange(c * SHOTS, (c + 1) * SHOTS, dtype=np.int64) for c in range(NUM_CHUNKS)),
        num_unused=0,
    )


def _settings(max_prompt_tokens: int | None = None) -> BuildSettings:
    return BuildSettings(
        epsilon=1.0,
        delta=1e-5,
        l2_clip_norm=(1e6,),
        shots_per_chunk=SHOTS,
        batch_size=4,
        progress=False,
        max_prompt_tokens=max_prompt_tokens,
    )


def _chunk_vectors(loaded, records, max_prompt_tokens: int | None = None) -> dict[int, np.ndarray]:
    """Per layer, the clipped vector of every chunk: (NUM_CHUNKS, k_l*d)."""
    heads = parse_head_spec("all", loaded.adapter.geometry)
    dims = {layer: len(heads.heads_in(layer)) * loaded.adapter.geometry.head_dim for layer in heads.layers}
    reference = {layer: np.zeros(dim) for layer, dim in dims.items()}
    clip_norms = parse_l2_clip_norms([1e6], heads.layers)
    settings = _settings(max_prompt_tokens)
    parts: dict[int, list[np.ndarray]] = {layer: [] for layer in heads.layers}
    for clipped in iter_clipped_chunks(loaded, records, _partition(), heads, settings, reference, clip_norms):
        for layer, values in clipped.items():
            parts[layer].append(values)
    return {layer: np.concatenate(values) for layer, values in parts.items()}


@pytest.fixture(scope="module", params=["embedded", "tiny-llava"])
def model_source(request, tiny_llava_path):
    if request.param == "embedded":
        return "embedded", ["red", "green", "blue", "yellow"]
    return str(tiny_llava_path), ["thing", "other", "cat"]


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_other_chunks_vectors_are_bitwise_unchanged(model_source, dtype):
    path, words = model_source
    loaded = load_model(path, dtype=dtype, device=TEST_DEVICE)
    before = _chunk_vectors(loaded, _records(words, lengthen=False, replace=False))
    after = _chunk_vectors(loaded, _records(words, lengthen=True, replace=True))
    for layer in before:
        assert not np.array_equal(before[layer][LONG_CHUNK], after[layer][LONG_CHUNK])  # it did change
        for chunk in UNCHANGED:
            np.testing.assert_array_equal(after[layer][chunk], before[layer][chunk], err_msg=f"chunk {chunk}")


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_other_chunks_selection_scores_are_bitwise_unchanged(model_source, dtype):
    path, words = model_source
    loaded = load_model(path, dtype=dtype, device=TEST_DEVICE)

    def scores(records):
        chunks = [records[c * SHOTS : (c + 1) * SHOTS] for c in range(NUM_CHUNKS)]
        return list(chunk_head_scores(loaded, chunks, max_prompt_tokens=None, progress=False))

    before = scores(_records(words, lengthen=False, replace=False))
    after = scores(_records(words, lengthen=True, replace=True))
    assert not np.array_equal(before[LONG_CHUNK].numpy(), after[LONG_CHUNK].numpy())
    for chunk in UNCHANGED:
        np.testing.assert_array_equal(after[chunk].numpy(), before[chunk].numpy(), err_msg=f"chunk {chunk}")


def test_dp_icl_votes_of_other_chunks_are_unchanged(tiny_llava_path):
    """DP-ICL's forward (greedy generation) runs one prompt at a time: other chunks' answers
    stay the same when one chunk's record grows. (Answers are discrete; the bitwise checks above
    are the sharp test of the shared one-prompt-per-pass path.)"""
    loaded = load_model(tiny_llava_path, dtype="bfloat16", device=TEST_DEVICE)
    words = ["thing", "other", "cat"]

    def answers(records):
        prompts = [
            chunk_prompt(records[c * SHOTS : (c + 1) * SHOTS], query="record", query_question="")
            for c in range(NUM_CHUNKS)
        ]
        return run_vote_forward(
            loaded, prompts, max_new_tokens=3, max_prompt_tokens=2048, advance=lambda n: None
        )

    before = answers(_records(words, lengthen=False, replace=False))
    after = answers(_records(words, lengthen=True, replace=True))
    assert [after[c] for c in UNCHANGED] == [before[c] for c in UNCHANGED]


def test_over_long_chunks_keep_leading_demonstrations_or_contribute_nothing(tiny_llava):
    """The public rule: a prompt over budget keeps its leading demonstrations that fit; a chunk
    whose query alone does not fit yields a zero row."""
    adapter = tiny_llava.adapter
    records = _records(["thing", "other", "cat"], lengthen=True, replace=False)
    full = chunk_prompt(records[:SHOTS], query="record", query_question="")
    one_demo = Prompt(full.demonstrations[:1], full.query)
    budget = prompt_length(adapter, one_demo)  # room for the first demonstration only
    assert prompt_length(adapter, full) > budget
    cut = _chunk_vectors(tiny_llava, records, max_prompt_tokens=budget)
    heads = parse_head_spec("all", adapter.geometry)
    expected = extract_selected_heads(adapter, [one_demo], heads)
    for layer in heads.layers:
        np.testing.assert_array_equal(cut[layer][LONG_CHUNK], expected[layer][0])
    tiny = prompt_length(adapter, zero_shot(full.query)) - 1  # no query fits alone
    dropped = _chunk_vectors(tiny_llava, records, max_prompt_tokens=tiny)
    assert all(not dropped[layer].any() for layer in heads.layers)


def test_the_prompt_budget_is_a_public_setting_recorded_in_the_artifact(
    tiny_llava_path, records_file, tmp_path
):
    """`dpmtv build --max-prompt-tokens` reaches the artifact with its rule; the default is the
    model's position limit (2048 for the tiny LLaVA)."""
    from click.testing import CliRunner

    from dpmtv.artifact.vector import load_task_vector
    from dpmtv.cli import main

    runner = CliRunner()
    common = ["build", "--model", str(tiny_llava_path), "--data", str(records_file), "--heads", "layers:0"]
    common += [
        "--epsilon",
        "1",
        "--delta",
        "1e-5",
        "--l2-clip-norm",
        "1.5",
        "--shots-per-chunk",
        "4",
        "--quiet",
    ]
    for extra, expected in (([], 2048), (["--max-prompt-tokens", "900"], 900)):
        out = tmp_path / f"v{expected}.safetensors"
        result = runner.invoke(main, [*common, "--out", str(out), *extra])
        assert result.exit_code == 0, result.output
        prompt = load_task_vector(out).metadata.prompt
        assert prompt["max_prompt_tokens"] == expected
        assert prompt["over_length_rule"] == "keep-leading-demonstrations"
        # the private passes: fixed public shapes need a budget (LLaVA allows them), else one per pass
        rows = 8192 // 900 if extra else 1  # at most 8192 padded tokens per pass
        assert prompt["private_batch_size"] == rows
        forward = (
            "one chunk per forward pass" if rows == 1 else f"fixed public shapes: {rows} rows of {expected}"
        )
        assert prompt["private_forward"].startswith(forward)
        shown = runner.invoke(main, ["inspect", str(out)], env={"COLUMNS": "400"}).output
        shown = " ".join(shown.replace("│", " ").split())  # a cell wrapped at any console width reads on
        assert f"{expected} tokens" in shown and forward in shown
    assert "--max-prompt-tokens" in runner.invoke(main, ["build", "--help"]).output
