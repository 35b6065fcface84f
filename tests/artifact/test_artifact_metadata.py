"""Metadata inventory: nothing in an artifact may depend on the private data except through the
noisy release. Two add-remove-one builds with the same public settings and seed on datasets of
very different N must have identical metadata apart from the creation time, the tensor hash and
functions of the noisy release (with private selection: the selected heads and their layers'
clip norms). Every field is listed, with why it is public, in docs/design.md "Artifact metadata".
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from dpmtv.artifact.vector import ArtifactMetadata, PrivacyMetadata
from dpmtv.data import load_records
from dpmtv.heads import parse_head_spec
from dpmtv.pipeline.build import BuildSettings, PrivateSelectionSettings, build_task_vector
from dpmtv.pipeline.settings import PrivateClipSettings
from tests.conftest import write_records

ALLOWED_TO_DIFFER = {"created_at", "tensors_sha256"}
NOISY_RELEASE_WITH_PRIVATE_SELECTION = {"heads", "privacy.l2_clip_norm"}
#: with --l2-clip-norm private: C = c·g and the chosen multiplier c, outputs of the accounted round
NOISY_RELEASE_WITH_PRIVATE_CLIP = {"privacy.l2_clip_norm", "privacy.clip_norm_selection.multiplier"}
#: with both private (the private-only path): the public layer scales g of the privately selected
#: heads, and what C = c·g over those heads fixes (Δ and the σ calibrated to it)
NOISY_RELEASE_PRIVATE_ONLY = {
    "privacy.clip_norm_selection.layer_scales",
    "privacy.l2_sensitivity",
    "privacy.sensitivity_l2_clip_norm",
    "privacy.noise_std",
    "privacy.noise_std_analytic",
}


def _flat(value, prefix=""):
    if isinstance(value, dict):
        out = {}
        for key, item in value.items():
            out.update(_flat(item, f"{prefix}{key}."))
        return out
    return {prefix.rstrip("."): value}


def _metadata(
    tiny_llava,
    folder: Path,
    num_records: int,
    *,
    private_selection: bool,
    private_clip: bool = False,
    selection: PrivateSelectionSettings | None = None,
) -> dict:
    records = load_records(write_records(folder, num_records, seed=num_records))
    settings = BuildSettings(
        epsilon=4.0,
        delta=1e-5,
        l2_clip_norm=(1.0,),  # with private_clip a placeholder: C is chosen inside the build
        private_clip=PrivateClipSettings() if private_clip else None,
        shots_per_chunk=4,
        neighbouring_relation="add-remove-one",
        num_chunks=4,
        insecure_seed=11,
        allow_insecure_seed=True,
        private_selection=(selection or PrivateSelectionSettings(k=2)) if private_selection else None,
        progress=False,
    )
    heads = None if private_selection else parse_head_spec("layers:0-1", tiny_llava.adapter.geometry)
    vector = build_task_vector(tiny_llava, records, heads, settings).vector
    return _flat(vector.metadata.model_dump(mode="json"))


@pytest.mark.parametrize("private_selection", [False, True])
def test_metadata_does_not_depend_on_the_private_data(tiny_llava, tmp_path, private_selection):
    small = _metadata(tiny_llava, tmp_path / "small", 6, private_selection=private_selection)
    large = _metadata(tiny_llava, tmp_path / "large", 60, private_selection=private_selection)
    allowed = ALLOWED_TO_DIFFER | (NOISY_RELEASE_WITH_PRIVATE_SELECTION if private_selection else set())
    assert set(small) == set(large)
    differing = {key for key in small if small[key] != large[key]}
    assert differing <= allowed, {key: (small[key], large[key]) for key in differing - allowed}
    assert not any("seconds" in key or "time" in key for key in small if key != "created_at")


@pytest.mark.parametrize("private_selection", [False, True], ids=["private-clip", "private-only"])
def test_metadata_of_a_private_clip_build_does_not_depend_on_the_private_data(
    tiny_llava, tmp_path, private_selection
):
    kwargs = {"private_selection": private_selection, "private_clip": True}
    small = _metadata(tiny_llava, tmp_path / "small", 6, **kwargs)
    large = _metadata(tiny_llava, tmp_path / "large", 60, **kwargs)
    allowed = ALLOWED_TO_DIFFER | NOISY_RELEASE_WITH_PRIVATE_CLIP
    if private_selection:
        allowed |= NOISY_RELEASE_WITH_PRIVATE_SELECTION | NOISY_RELEASE_PRIVATE_ONLY
    assert set(small) == set(large)
    assert "privacy.clip_norm_selection.multiplier" in small
    differing = {key for key in small if small[key] != large[key]}
    assert differing <= allowed, {key: (small[key], large[key]) for key in differing - allowed}


def test_metadata_of_a_choice_on_the_release_does_not_depend_on_the_private_data(tiny_llava, tmp_path):
    """The whole pool released, then the candidate chosen on it (over the records: N is private
    under add-remove-one): only the noisy outputs differ, the chosen index among them."""
    selection = PrivateSelectionSettings(k=1, method="candidates", utility="released-probability")
    small = _metadata(tiny_llava, tmp_path / "small", 6, private_selection=True, selection=selection)
    large = _metadata(tiny_llava, tmp_path / "large", 60, private_selection=True, selection=selection)
    assert small["head_selection.details.utility"] == "released-probability"
    allowed = ALLOWED_TO_DIFFER | NOISY_RELEASE_WITH_PRIVATE_SELECTION | {"head_selection.details.chosen"}
    assert set(small) == set(large)
    differing = {key for key in small if small[key] != large[key]}
    assert differing <= allowed, {key: (small[key], large[key]) for key in differing - allowed}


def test_every_metadata_field_is_documented():
    """The table in docs/design.md names every field of the artifact metadata."""
    text = (Path(__file__).parents[2] / "docs" / "design.md").read_text(encoding="utf-8")
    section = text.split("Artifact metadata\n", 1)[1]
    documented = set(re.findall(r"^\| `([a-z0-9_.]+)`", section, flags=re.MULTILINE))
    fields = {name for name in ArtifactMetadata.model_fields if name != "privacy"}
    fields |= {f"privacy.{name}" for name in PrivacyMetadata.model_fields}
    assert fields <= documented, sorted(fields - documented)
