"""Artifact integrity: hash verification, tamper detection, model mismatch, atomic writes."""

import json

import numpy as np
import pytest

from dpmtv.artifact.vector import load_task_vector, save_task_vector
from dpmtv.data import load_records
from dpmtv.errors import ArtifactIntegrityError, ModelMismatchError
from dpmtv.heads import parse_head_spec
from dpmtv.inference import apply
from dpmtv.models.loading import load_model
from dpmtv.pipeline.build import BuildSettings, build_task_vector


@pytest.fixture(scope="module")
def artifact(tiny_llava, tmp_path_factory):
    from tests.conftest import write_records

    folder = tmp_path_factory.mktemp("artifact")
    records = load_records(write_records(folder / "data", 12))
    settings = BuildSettings(epsilon=1.0, delta=1e-5, l2_clip_norm=(1.0,), shots_per_chunk=4, progress=False)
    heads = parse_head_spec("heads:0.1,1.2", tiny_llava.adapter.geometry)
    return build_task_vector(tiny_llava, records, heads, settings, out=folder / "task.safetensors").path


def _header_and_body(path):
    raw = path.read_bytes()
    size = int.from_bytes(raw[:8], "little")
    return json.loads(raw[8 : 8 + size]), raw[8 + size :]


def _write(path, header, body):
    encoded = json.dumps(header).encode()
    encoded += b" " * (-len(encoded) % 8)
    path.write_bytes(len(encoded).to_bytes(8, "little") + encoded + body)


def test_tampered_tensor_bytes_are_detected(artifact, tmp_path):
    header, body = _header_and_body(artifact)
    start, _ = header["vector"]["data_offsets"]
    flipped = bytearray(body)
    flipped[start] ^= 0x01
    target = tmp_path / "tampered.safetensors"
    _write(target, header, bytes(flipped))
    with pytest.raises(ArtifactIntegrityError, match="has been modified"):
        load_task_vector(target)


def test_truncated_or_garbage_files_are_refused(artifact, tmp_path):
    (tmp_path / "cut.safetensors").write_bytes(artifact.read_bytes()[:100])
    with pytest.raises(ArtifactIntegrityError, match="not a readable dpmtv task vector"):
        load_task_vector(tmp_path / "cut.safetensors")
    with pytest.raises(ArtifactIntegrityError, match="does not exist"):
        load_task_vector(tmp_path / "missing.safetensors")


def test_other_model_is_refused_naming_the_field(artifact, tiny_checkpoint):
    other = load_model(tiny_checkpoint("llava", seed=1))
    vector = load_task_vector(artifact)
    with pytest.raises(ModelMismatchError, match="field 'attention_weights_sha256' differs"):
        with apply(other, vector):
            pass


def test_same_model_loaded_in_bfloat16_is_accepted(artifact, tiny_llava_path):
    vector = load_task_vector(artifact)
    with apply(load_model(tiny_llava_path, dtype="bfloat16"), vector):
        pass


def test_failed_write_leaves_no_file(artifact, tmp_path, monkeypatch):
    vector = load_task_vector(artifact)
    import dpmtv.artifact.vector as module

    def explode(*args, **kwargs):
        raise OSError("disk full")

    monkeypatch.setattr(module, "save_file", explode)
    with pytest.raises(OSError, match="disk full"):
        save_task_vector(vector, tmp_path / "out.safetensors")
    assert list(tmp_path.iterdir()) == []


def test_vector_patches_follow_the_head_order(artifact):
    from dpmtv.inference import vector_patches

    vector = load_task_vector(artifact)
    patches = vector_patches(vector)
    assert sorted(patches) == [0, 1]
    assert patches[0].heads.tolist() == [1] and patches[1].heads.tolist() == [2]
    np.testing.assert_array_equal(patches[1].values.numpy(), vector.values[1:2])
    rows = vector.rows_per_layer()
    assert sorted(rows) == [0, 1]
    np.testing.assert_array_equal(rows[1], vector.values[1:2])


def test_layer_patch_from_flat_or_per_head_rows_is_the_same_patch():
    import torch

    from dpmtv.forward.hooks import LayerPatch, layer_patches
    from dpmtv.heads import HeadSet

    rows = np.arange(12, dtype=np.float64).reshape(3, 4)  # 3 heads, d = 4
    flat, per_head = LayerPatch.from_rows([0, 2, 5], rows.ravel()), LayerPatch.from_rows([0, 2, 5], rows)
    for patch in (flat, per_head):
        assert patch.heads.tolist() == [0, 2, 5] and patch.values.dtype == torch.float32
        np.testing.assert_array_equal(patch.values.numpy(), rows.astype(np.float32))
    heads = HeadSet.of([(1, 0), (1, 2), (4, 3)])
    patches = layer_patches({1: rows[:2].ravel(), 4: rows[2]}, heads)
    assert sorted(patches) == [1, 4] and patches[4].heads.tolist() == [3]
    np.testing.assert_array_equal(patches[1].values.numpy(), rows[:2].astype(np.float32))
