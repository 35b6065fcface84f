"""Forgeries that edit only the metadata JSON and recompute every hash: each contradicts a number
the loader re-derives (Δ from the clip norms, m and the relation; the relation and unit from the
stored counts; σ and the sampler's reference numbers from the calibration; the accounted events
from the head selection), so each is refused naming the field (issues 23.2 and 27)."""

from __future__ import annotations

import math

import pytest

from dpmtv.artifact.vector import load_task_vector
from dpmtv.data import load_records
from dpmtv.errors import ArtifactIntegrityError
from dpmtv.heads import parse_head_spec
from dpmtv.pipeline.build import BuildSettings, build_task_vector
from dpmtv.privacy import analytic_gaussian_noise_multiplier, calibrate_gaussian_noise_multiplier
from dpmtv.privacy.noise import opendp_noise_std
from tests.artifact.test_artifact_claims import _edited


def _build(tiny_llava, folder, **extra):
    from tests.conftest import write_records

    records = load_records(write_records(folder / "data", 12))
    settings = BuildSettings(
        epsilon=1.0, delta=1e-5, l2_clip_norm=(1.0,), shots_per_chunk=4, progress=False, **extra
    )
    heads = parse_head_spec("heads:0.1,1.2", tiny_llava.adapter.geometry)
    return build_task_vector(tiny_llava, records, heads, settings, out=folder / "task.safetensors").path


@pytest.fixture(scope="module")
def private_artifact(tiny_llava, tmp_path_factory):
    return _build(tiny_llava, tmp_path_factory.mktemp("forge-private"))


@pytest.fixture(scope="module")
def seeded_artifact(tiny_llava, tmp_path_factory):
    return _build(
        tiny_llava,
        tmp_path_factory.mktemp("forge-seeded"),
        insecure_seed=5,
        allow_insecure_seed=True,
    )


def _shrink_sensitivity_to_epsilon(epsilon):
    """ε 1 → ``epsilon`` with C and m unchanged: Δ' chosen so that the calibration at ``epsilon``
    gives the recorded σ, and the multiplier and the Gaussian event rewritten to match."""

    def edit(metadata):
        p = metadata["privacy"]
        multiplier = calibrate_gaussian_noise_multiplier(
            epsilon=epsilon, delta=p["delta"], reserved_delta=p["delta"] * 2.0**-40
        )
        p["l2_sensitivity"] = p["noise_std"] / multiplier
        p["epsilon"] = p["epsilon_spent"] = epsilon
        p["noise_multiplier"] = multiplier
        p["accounting_events"]["noise_multiplier"] = multiplier
        sensitivity = p["l2_sensitivity"]
        p["noise_std_analytic"] = sensitivity * analytic_gaussian_noise_multiplier(
            epsilon=epsilon, delta=p["delta"]
        )
        p["noise_std_sampler_map"] = opendp_noise_std(
            l2_sensitivity=sensitivity, epsilon=epsilon, delta=p["delta"]
        )

    return edit


def _relabel_seeded_as_opendp(metadata):
    p = metadata["privacy"]
    p.update(noise_sampler="opendp", insecure_seed=None, private=True, secure_noise=True)


def _scale_num_chunks(factor):
    def edit(metadata):
        metadata["privacy"]["num_chunks"] *= factor

    return edit


def _scale_clip_norms(factor):
    def edit(metadata):
        p = metadata["privacy"]
        p["l2_clip_norm"] = [c * factor for c in p["l2_clip_norm"]]

    return edit


def _relabel_add_remove(metadata):
    metadata["privacy"]["neighbouring_relation"] = "add-remove-one"


def _relabel_user(metadata):
    metadata["privacy"]["privacy_unit"] = "user"


FORGERIES = {
    "epsilon 1 -> 0.1 by shrinking the sensitivity": (_shrink_sensitivity_to_epsilon(0.1), "l2_sensitivity"),
    "num_chunks x1000": (_scale_num_chunks(1000), "num_chunks"),
    "num_chunks x100": (_scale_num_chunks(100), "num_chunks"),
    "clip norms x100": (_scale_clip_norms(100.0), "l2_sensitivity"),
    "replace-one relabelled add-remove-one": (_relabel_add_remove, "num_records"),
    "record unit relabelled user": (_relabel_user, "privacy_unit"),
}


@pytest.mark.parametrize("name", sorted(FORGERIES))
def test_a_forged_claim_with_recomputed_hashes_is_refused(private_artifact, tmp_path, name):
    edit, field = FORGERIES[name]
    target = _edited(private_artifact, tmp_path / "forged.safetensors", edit, rehash=True)
    with pytest.raises(ArtifactIntegrityError, match=rf"privacy\.{field}"):
        load_task_vector(target)


def test_a_seeded_vector_relabelled_private_opendp_is_refused(seeded_artifact, tmp_path):
    target = _edited(seeded_artifact, tmp_path / "forged.safetensors", _relabel_seeded_as_opendp, rehash=True)
    with pytest.raises(ArtifactIntegrityError, match=r"privacy\.noise_std_sampler_map"):
        load_task_vector(target)


def test_the_untouched_artifacts_load(private_artifact, seeded_artifact):
    assert load_task_vector(private_artifact).metadata.privacy.private
    seeded = load_task_vector(seeded_artifact).metadata.privacy
    assert not seeded.private and math.isfinite(seeded.epsilon)


@pytest.fixture(scope="module")
def selected_artifact(tiny_llava, tmp_path_factory):
    from dpmtv.pipeline.build import PrivateSelectionSettings
    from tests.conftest import write_records

    folder = tmp_path_factory.mktemp("forge-selected")
    settings = BuildSettings(
        epsilon=4.0,
        delta=1e-5,
        l2_clip_norm=(1.0,),
        shots_per_chunk=4,
        progress=False,
        private_selection=PrivateSelectionSettings(k=1),
    )
    records = load_records(write_records(folder / "data", 16))
    return build_task_vector(tiny_llava, records, None, settings, out=folder / "t.safetensors").path


def _drop_the_selection_event(metadata):
    p = metadata["privacy"]
    p["accounting_events"] = p["accounting_events"]["events"][-1]


def _sensitivity_over_no_layer(metadata):
    metadata["privacy"]["sensitivity_l2_clip_norm"] = []


def _more_selected_heads(metadata):
    metadata["head_selection"]["details"]["k"] = 8


@pytest.mark.parametrize(
    ("edit", "field"),
    [(_drop_the_selection_event, "accounting_events"),
     (_sensitivity_over_no_layer, "sensitivity_l2_clip_norm"),
     (_more_selected_heads, "accounting_events")],
)  # fmt: skip
def test_a_forged_private_selection_claim_is_refused(selected_artifact, tmp_path, edit, field):
    assert load_task_vector(selected_artifact).metadata.head_selection["method"] == "private-noisy-top-k"
    target = _edited(selected_artifact, tmp_path / "forged.safetensors", edit, rehash=True)
    with pytest.raises(ArtifactIntegrityError, match=rf"privacy\.{field}"):
        load_task_vector(target)
