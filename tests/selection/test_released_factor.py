"""The choice on the release draws with the scale its relation allows: ``1/ε_sel`` under
add-remove-one (monotone totals), ``2/ε_sel`` under replace-one; both account the same
``ε_sel``-DP event, and a recorded scale below the plan's is refused on load."""

from __future__ import annotations

from dataclasses import replace

import pytest

import dpmtv.selection.released as released
from dpmtv.artifact.vector import load_task_vector
from dpmtv.data import load_records
from dpmtv.errors import ArtifactIntegrityError
from dpmtv.pipeline.build import build_task_vector
from tests.artifact.test_artifact_claims import _edited
from tests.conftest import write_records
from tests.selection.test_released_choice import SETTINGS


@pytest.fixture(scope="module")
def builds(tiny_llava, tmp_path_factory):
    """One private-only build per relation, and the ``monotone`` each choice was drawn with."""
    folder = tmp_path_factory.mktemp("factor")
    records = load_records(write_records(folder / "data", 12))
    drawn, out = {}, {}
    real = released.noisy_top_k
    for relation in ("add-remove-one", "replace-one"):
        chunks = 3 if relation == "add-remove-one" else None  # replace-one: m follows from N
        settings = replace(SETTINGS, neighbouring_relation=relation, num_chunks=chunks, l2_clip_norm=(1.0,))

        def spy(*args, relation=relation, **kwargs):
            drawn[relation] = kwargs["monotone"]
            return real(*args, **kwargs)

        released.noisy_top_k = spy
        try:
            out[relation] = folder / f"{relation}.safetensors"
            build_task_vector(tiny_llava, records, None, settings, out=out[relation])
        finally:
            released.noisy_top_k = real
    return out, drawn


def test_the_scale_halves_under_add_remove_one_and_the_event_stays(builds):
    out, drawn = builds
    assert drawn == {"add-remove-one": True, "replace-one": False}
    details = {r: load_task_vector(path).metadata.head_selection["details"] for r, path in out.items()}
    epsilon_selection = details["replace-one"]["epsilon_selection"]
    assert details["add-remove-one"]["epsilon_selection"] == epsilon_selection
    assert details["add-remove-one"]["noise_scale"] == pytest.approx(1.0 / epsilon_selection)
    assert details["replace-one"]["noise_scale"] == pytest.approx(2.0 / epsilon_selection)
    assert details["add-remove-one"]["event"] == details["replace-one"]["event"]


def test_a_recorded_scale_below_the_plan_is_refused(builds, tmp_path):
    out, _ = builds

    def halve(metadata):
        details = metadata["head_selection"]["details"]
        details["noise_scale"] = details["noise_scale"] / 2

    target = tmp_path / "forged.safetensors"
    _edited(out["replace-one"], target, halve, rehash=True)
    with pytest.raises(ArtifactIntegrityError, match="Gumbel scale"):
        load_task_vector(target)
