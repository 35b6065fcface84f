"""An artifact's claim cannot be edited: the metadata is hashed with the tensors, and on load the
claim must be consistent (ε > 0, δ ∈ (0, 1), σ = the calibration for Δ, ε, δ and the sampler,
finite values); anything else is refused naming the field."""

from __future__ import annotations

import hashlib
import json

import numpy as np
import pytest
from click.testing import CliRunner

from dpmtv.artifact.vector import load_task_vector, tensors_sha256
from dpmtv.cli import main
from dpmtv.data import load_records
from dpmtv.errors import ArtifactIntegrityError
from dpmtv.heads import parse_head_spec
from dpmtv.pipeline.build import BuildSettings, build_task_vector
from tests.artifact.test_vector import _header_and_body, _write


@pytest.fixture(scope="module")
def artifact(tiny_llava, tmp_path_factory):
    from tests.conftest import write_records

    folder = tmp_path_factory.mktemp("claims")
    records = load_records(write_records(folder / "data", 12))
    settings = BuildSettings(epsilon=1.0, delta=1e-5, l2_clip_norm=(1.0,), shots_per_chunk=4, progress=False)
    heads = parse_head_spec("heads:0.1,1.2", tiny_llava.adapter.geometry)
    return build_task_vector(tiny_llava, records, heads, settings, out=folder / "task.safetensors").path


def _edited(artifact, target, edit, *, rehash: bool, vector=None):
    """A copy with the dpmtv metadata edited; ``rehash``: recompute every hash the way an
    editor who knows the format would (so only the consistency checks can catch the edit)."""
    header, body = _header_and_body(artifact)
    metadata = json.loads(header["__metadata__"]["dpmtv"])
    edit(metadata)
    if vector is not None:
        start, stop = header["vector"]["data_offsets"]
        body = body[:start] + vector.astype(np.float32).tobytes() + body[stop:]
    if rehash:
        tensors = {"vector": vector} if vector is not None else {}
        if tensors:
            from safetensors.numpy import load_file

            loaded = load_file(str(artifact))
            loaded["vector"] = vector.astype(np.float32)
            metadata["tensors_sha256"] = tensors_sha256(loaded)
        text = json.dumps(metadata)
        header["__metadata__"]["dpmtv"] = text
        header["__metadata__"]["dpmtv_sha256"] = hashlib.sha256(text.encode()).hexdigest()
    else:
        header["__metadata__"]["dpmtv"] = json.dumps(metadata)
    _write(target, header, body)
    return target


def _set(section, field, value):
    def edit(metadata):
        (metadata[section] if section else metadata)[field] = value

    return edit


def test_an_edited_claim_fails_the_hash(artifact, tmp_path):
    target = _edited(artifact, tmp_path / "e.safetensors", _set("privacy", "epsilon", 0.1), rehash=False)
    with pytest.raises(ArtifactIntegrityError, match="metadata has been modified"):
        load_task_vector(target)


@pytest.mark.parametrize(
    ("field", "value"),
    [("epsilon", 0.1), ("epsilon", -3.0), ("delta", 5.0), ("noise_std", 0.0), ("noise_std", 1e-9),
     ("l2_sensitivity", 1e6), ("noise_sampler", "csprng-numpy-typo"), ("private", False)],
)  # fmt: skip
def test_an_inconsistent_claim_is_refused_naming_the_field(artifact, tmp_path, field, value):
    target = _edited(artifact, tmp_path / "e.safetensors", _set("privacy", field, value), rehash=True)
    with pytest.raises(ArtifactIntegrityError, match=rf"privacy\.{field}"):
        load_task_vector(target)


def test_a_nan_vector_with_a_matching_hash_is_refused(artifact, tmp_path):
    values = load_task_vector(artifact).values
    target = _edited(
        artifact, tmp_path / "n.safetensors", lambda m: None, rehash=True, vector=values * np.nan
    )
    with pytest.raises(ArtifactIntegrityError, match="vector.*not finite"):
        load_task_vector(target)


def test_the_untouched_artifact_loads(artifact):
    assert load_task_vector(artifact).metadata.privacy.epsilon == 1.0


@pytest.mark.parametrize(
    ("version", "why"), [(1, "not covered by its hash"), (2, "not re-derived from its clip norms")]
)
def test_inspect_explains_an_old_format_artifact(artifact, tmp_path, version, why):
    old = _set(None, "format_version", version)
    target = _edited(artifact, tmp_path / "old.safetensors", old, rehash=True)
    result = CliRunner().invoke(main, ["inspect", str(target)])
    assert result.exit_code == 1
    assert f"format {version}" in result.output and why in " ".join(result.output.split())
    assert "rebuild" in result.output and "Traceback" not in result.output
