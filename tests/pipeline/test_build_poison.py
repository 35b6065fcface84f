"""One record must not decide whether an artifact exists (issue 23 item 1; docs/design.md §2, §10).

A "poison" record is one that makes its chunk's computation fail. What one record can fail on by
itself is refused by the validation pass before the charge and before any private forward pass
(nothing charged, the record named); what can only fail while a chunk is computed follows the
failed-chunk rule (the chunk contributes the zero vector and casts no vote), so the build ends
the same way on both sides of a neighbouring pair. Real tiny LLaVA and Qwen2-VL checkpoints,
real processors; the only patch is a forward-pass wrapper that turns a marked prompt's image
features into NaN (a model that overflows on one input).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest
import torch
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from PIL import Image

from dpmtv.cli import main
from dpmtv.data.records import load_records
from dpmtv.errors import DpmtvError, RecordError
from dpmtv.forward.executor import LocalExecutor
from dpmtv.heads import HeadSet
from dpmtv.models.loading import load_model
from dpmtv.pipeline.build import BuildSettings, PrivateSelectionSettings, build_task_vector
from dpmtv.pipeline.plan import plan_layout
from dpmtv.pipeline.private_batching import resolve_private_batch_size
from dpmtv.pipeline.tasks import ChunkJob, ClippedRows
from dpmtv.selection.private import chunk_head_scores
from tests.cli.test_cli_ledger import _build, _init, _show, forward_calls  # noqa: F401
from tests.conftest import write_records

pytestmark = pytest.mark.filterwarnings("ignore:the noise swamps the signal")  # tiny data, by design

POISON = "POISON"  # a question holding it makes the patched forward pass return NaN


def _rewrite(path: Path, change) -> Path:
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    for index, row in enumerate(rows):
        change(index, row)
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def test_blank_answers_refuse_a_private_selection_build_before_its_charge(
    tiny_llava_path,
    tmp_path,
    forward_calls,  # noqa: F811
):
    """The user's report: 20 records, 4 blank answers, --heads-from private with a ledger. Every
    build used to charge ε and write nothing, printing the record's answer after the charge."""
    blank = (3, 8, 13, 18)
    data = _rewrite(
        write_records(tmp_path / "data", 20), lambda i, row: row.update(answer="   ") if i in blank else None
    )
    runner, ledger, out = CliRunner(), tmp_path / "ledger.sqlite", tmp_path / "v.safetensors"
    _init(runner, ledger, "D", 20)
    charge = ["--heads-from", "private", "--select-k", "2", "--dataset", "D", "--ledger", str(ledger)]
    for _attempt in range(2):
        result = runner.invoke(main, _build(tiny_llava_path, data, out, *charge))
        message = " ".join(result.output.split())
        assert result.exit_code == 1, result.output  # a refused record
        assert f"{data}:4: field 'answer' is blank" in message and "charged" not in message
        assert not out.exists()
    assert forward_calls == [] and _show(runner, ledger, "D")["charges"] == []
    _rewrite(data, lambda i, row: row.update(answer=f"thing {i}") if i in blank else None)
    result = runner.invoke(main, _build(tiny_llava_path, data, out, *charge))
    assert result.exit_code == 0, result.output
    assert out.exists() and len(_show(runner, ledger, "D")["charges"]) == 1


@pytest.fixture(scope="module")
def tiny_qwen(tiny_checkpoint):
    return load_model(tiny_checkpoint("qwen2_vl"))


def _settings(**extra) -> BuildSettings:
    values = dict(epsilon=8.0, delta=1e-5, l2_clip_norm=(2.0,), shots_per_chunk=4, progress=False)
    values.update(extra)
    return BuildSettings(**values)


SELECT = PrivateSelectionSettings(k=2, pool="layers:0-1")


def test_an_image_the_processor_refuses_is_refused_before_the_charge(tiny_qwen, tmp_path):
    """A 1000×2 px image: Qwen2-VL's processor refuses aspect ratios of 200 or more. It used to
    fail in the middle of the build, after private selection's charge."""
    data = write_records(tmp_path / "data", 12)
    Image.new("RGB", (1000, 2)).save(tmp_path / "data" / "img" / "5.png")
    charges = []
    with pytest.raises(RecordError, match=r"records\.jsonl:6: field 'image'.*1000×2 px.*aspect ratio"):
        build_task_vector(
            tiny_qwen,
            load_records(data),
            None,
            _settings(private_selection=SELECT),
            before_noise=charges.append,
        )
    assert charges == []


def _poisoned_forward(monkeypatch, loaded):
    """Patch the model class's forward: a prompt whose text holds POISON gets NaN image features —
    that row's images only, when a fixed-shape pass holds several rows (the same image count each)."""
    model_class = type(loaded.model)
    original, tokenizer = model_class.forward, loaded.adapter.tokenizer

    def forward(self, *args, **kwargs):
        ids, pixels = kwargs.get("input_ids"), kwargs.get("pixel_values")
        if ids is not None and pixels is not None:
            per_row = pixels.shape[0] // ids.shape[0]  # (rows * images (or patches) per row, ...)
            scale = torch.ones(pixels.shape[0], *[1] * (pixels.dim() - 1), dtype=pixels.dtype)
            for row in range(ids.shape[0]):
                if POISON in tokenizer.decode(ids[row]):
                    scale[row * per_row : (row + 1) * per_row] = float("nan")
            kwargs["pixel_values"] = pixels * scale
        return original(self, *args, **kwargs)

    monkeypatch.setattr(model_class, "forward", forward)


def test_a_chunk_whose_forward_pass_gives_nan_contributes_zero_and_casts_no_vote(
    tiny_llava, tmp_path, monkeypatch
):
    records = load_records(write_records(tmp_path / "data", 12))
    poisoned = list(records)
    poisoned[5] = dataclasses.replace(records[5], question=f"{POISON} what is shown?")
    settings = _settings(insecure_seed=3, allow_insecure_seed=True, max_prompt_tokens=2048)
    heads = HeadSet.of([(0, 0), (1, 1)])
    layout = plan_layout(tiny_llava, records, heads, settings)  # seeded: the same partition both sides
    dim = tiny_llava.adapter.geometry.head_dim
    job = ChunkJob(heads, settings, {layer: np.zeros(dim) for layer in heads.layers}, layout.l2_clip_norms)
    clean = LocalExecutor().run(tiny_llava, records, layout.release_part, ClippedRows(job))
    _poisoned_forward(monkeypatch, tiny_llava)
    rows = LocalExecutor().run(tiny_llava, poisoned, layout.release_part, ClippedRows(job))
    chunks = [list(chunk) for chunk in layout.release_part.nonempty_chunks()]
    hit = next(j for j, chunk in enumerate(chunks) if 5 in chunk[: settings.shots_per_chunk])
    assert np.all(rows[hit] == 0) and np.any(clean[hit] != 0)
    others = [j for j in range(len(chunks)) if j != hit]
    assert resolve_private_batch_size(tiny_llava.adapter, settings) > 1  # a shared fixed-shape pass
    np.testing.assert_array_equal(rows[others], clean[others])  # bitwise
    chunk_records = [[poisoned[int(i)] for i in chunk[:4]] for chunk in chunks]
    scores = list(chunk_head_scores(tiny_llava, chunk_records, progress=False))
    assert scores[hit] is None and all(scores[j] is not None for j in others)


# -- the property: a poison record never decides the outcome ------------------------------------

NUM_RECORDS = 8  # two chunks of four
BUDGET = 1200  # tokens; a clean 4-shot chunk prompt of the tiny Qwen2-VL needs about 450


def _poison(kind: str, record, folder: Path):
    if kind == "blank-answer":
        return dataclasses.replace(record, answer=" \t ")
    if kind == "undecodable-image":
        (folder / "broken.png").write_bytes(b"\x89PNG not really")
        return dataclasses.replace(record, images=(folder / "broken.png",))
    if kind == "extreme-aspect-ratio":
        Image.new("RGB", (1000, 2)).save(folder / "thin.png")
        return dataclasses.replace(record, images=(folder / "thin.png",))
    if kind == "over-long-prompt":
        return dataclasses.replace(record, question="why? " * (BUDGET // 4))
    if kind == "damaged-pixel-data":  # readable header and checksums: fails only when decoded
        (folder / "damaged.png").write_bytes(damaged_png(record.images[0]))
        return dataclasses.replace(record, images=(folder / "damaged.png",))
    return dataclasses.replace(record, question=f"{POISON} what is shown?")  # "nan-activations"


def damaged_png(source: Path) -> bytes:
    """``source``'s PNG with its pixel data (IDAT) replaced by bytes that are no zlib stream, the
    chunk's CRC recomputed: the header and every checksum hold, only decoding fails."""
    import struct
    import zlib

    data = bytearray(source.read_bytes())
    at = data.index(b"IDAT") - 4  # the chunk's length field
    (length,) = struct.unpack(">I", data[at : at + 4])
    junk = bytes(range(7, 7 + length)) if length < 249 else bytes(length)
    data[at + 8 : at + 8 + length] = junk
    data[at + 8 + length : at + 12 + length] = struct.pack(">I", zlib.crc32(b"IDAT" + junk))
    return bytes(data)


def test_damaged_pixel_data_passes_the_loaders_and_fails_when_decoded(tmp_path):
    path = write_records(tmp_path, 2)
    damaged = tmp_path / "img" / "1.png"
    damaged.write_bytes(damaged_png(damaged))
    record = load_records(path)[1]  # header and CRCs hold: not decoded, not refused here
    assert record.image_sizes() == ((20, 20),)
    with pytest.raises(RecordError, match=r"records\.jsonl:2: field 'image': .* is not a readable image"):
        record.load_images()


PER_RECORD = ("blank-answer", "undecodable-image", "extreme-aspect-ratio", "over-long-prompt")


def _outcome(loaded, records, private_selection: bool, out: Path, forwards: list) -> tuple:
    """(artifact written, charged, forward passes run) of one build; a refusal is not an error here."""
    charges, before = [], len(forwards)
    heads = None if private_selection else HeadSet.of([(0, 1), (1, 2)])
    settings = _settings(private_selection=SELECT if private_selection else None, max_prompt_tokens=BUDGET)
    with contextlib.suppress(DpmtvError):
        build_task_vector(loaded, records, heads, settings, out=out, before_noise=charges.append)
    return out.exists(), bool(charges), len(forwards) > before


@pytest.fixture(scope="module")
def clean_records(tmp_path_factory):
    return load_records(write_records(tmp_path_factory.mktemp("clean"), NUM_RECORDS))


@pytest.mark.slow
@pytest.mark.parametrize("kind", [*PER_RECORD, "nan-activations", "damaged-pixel-data"])
@settings(max_examples=2, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(index=st.integers(0, NUM_RECORDS - 1), private_selection=st.booleans())
def test_a_poison_record_never_decides_whether_an_artifact_exists(
    tiny_qwen, clean_records, tmp_path_factory, kind, index, private_selection
):
    """D and D' differ in record ``index``, which is a poison on the D' side. With the validation
    pass, a poison that one record fails on by itself is refused before any forward pass and
    charges nothing; with the validation pass removed (standing for a file that changes after it,
    or a failure only the whole chunk shows), the build on D' ends as the one on D: artifact and
    charge. A NaN-producing record is seen only mid-build: same outcome as D either way."""
    folder = tmp_path_factory.mktemp("poison")
    neighbour = list(clean_records)
    neighbour[index] = _poison(kind, clean_records[index], folder)
    forwards: list[int] = []
    with pytest.MonkeyPatch.context() as patch:
        original = type(tiny_qwen.model).forward
        patch.setattr(
            type(tiny_qwen.model),
            "forward",
            lambda self, *a, **k: forwards.append(1) or original(self, *a, **k),
        )
        _poisoned_forward(patch, tiny_qwen)
        clean = _outcome(tiny_qwen, clean_records, private_selection, folder / "d.safetensors", forwards)
        validated = _outcome(tiny_qwen, neighbour, private_selection, folder / "d1.safetensors", forwards)
        patch.setattr("dpmtv.pipeline.build.validate_build_inputs", lambda *a, **k: None, raising=False)
        unvalidated = _outcome(tiny_qwen, neighbour, private_selection, folder / "d2.safetensors", forwards)
    assert clean == (True, True, True)
    assert validated == ((False, False, False) if kind in PER_RECORD else clean)
    assert unvalidated == clean
