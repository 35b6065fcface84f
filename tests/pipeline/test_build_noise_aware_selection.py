"""The noise-aware candidate choice inside the build (issue 28): the release std each candidate's
utility adds (against its closed form, from public numbers only), and the private-only build with
parallel composition (selection and release on disjoint halves: the charge is the worse of the two,
checked against dp-accounting directly; the load re-derives it and refuses an edited claim)."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest
from dp_accounting.pld import common
from dp_accounting.pld import privacy_loss_distribution as pld_lib

from dpmtv.artifact.vector import load_task_vector
from dpmtv.data import load_records
from dpmtv.errors import ArtifactIntegrityError
from dpmtv.pipeline.build import BuildSettings, build_task_vector
from dpmtv.pipeline.plan import plan_build
from dpmtv.pipeline.reference import public_layer_scales
from dpmtv.pipeline.selection_noise import candidate_release_std
from dpmtv.pipeline.settings import PrivateClipSettings, PrivateSelectionSettings
from dpmtv.privacy import epsilon_of, event_from_json
from dpmtv.privacy.disjoint import DisjointReleases
from dpmtv.selection.candidates import candidate_head_sets

SELECTION = PrivateSelectionSettings(
    k=1, method="candidates", candidates="layer-groups", utility="noisy-probability", selection_fraction=0.3
)
SETTINGS = BuildSettings(
    epsilon=1.0,
    delta=1e-5,
    l2_clip_norm=(1.0,),
    shots_per_chunk=4,
    progress=False,
    private_selection=SELECTION,
    private_clip=PrivateClipSettings(epsilon_fraction=0.2),
)


def test_each_candidates_std_is_the_release_multiplier_times_its_own_sensitivity(tiny_llava, records_file):
    records = load_records(records_file)
    plan = plan_build(tiny_llava, records, None, SETTINGS)
    candidates = candidate_head_sets("layer-groups", plan.candidates)
    std = candidate_release_std(tiny_llava, candidates, plan, SETTINGS)
    m, c = plan.layout.release_part.num_chunks, SELECTION.noise_clip_multiplier
    assert plan.release is not None and m == len(records) // 4
    for candidate, got in zip(candidates, std, strict=True):
        g = public_layer_scales(tiny_llava, candidate, SETTINGS)
        closed = plan.release.noise_multiplier * 2 * c * math.sqrt(sum(v * v for v in g.values())) / m
        assert got == pytest.approx(closed, rel=1e-12)
    assert std[candidates.index(plan.candidates)] == max(std)  # all heads: the most noise
    given = replace(SETTINGS, private_clip=None)  # a given C: Δ is the pool's worst case for all
    given_plan = plan_build(tiny_llava, records, None, given)
    assert set(candidate_release_std(tiny_llava, candidates, given_plan, given)) == {
        given_plan.release.noise_std
    }


def test_a_private_only_build_with_parallel_halves_costs_the_worse_half(tiny_llava, records_file, tmp_path):
    records = load_records(records_file)
    settings = replace(SETTINGS, private_selection=replace(SELECTION, composition="parallel"))
    plan = plan_build(tiny_llava, records, None, settings)
    assert isinstance(plan.event, DisjointReleases)
    selection, release = plan.event.alternatives
    # dp-accounting directly: the selection half one pure 1.0-DP round (the whole ε), the release
    # half the clip round (0.2) composed with the Gaussian, within (1, 1e-5)
    pure = pld_lib.from_privacy_parameters(common.DifferentialPrivacyParameters(1.0, 0.0))
    assert epsilon_of(selection, delta=1e-5) == pytest.approx(pure.get_epsilon_for_delta(1e-5), rel=1e-6)
    clip = pld_lib.from_privacy_parameters(common.DifferentialPrivacyParameters(0.2, 0.0))
    gaussian = pld_lib.from_gaussian_mechanism(
        standard_deviation=plan.release.noise_multiplier, value_discretization_interval=1e-4
    )
    assert clip.compose(gaussian).get_epsilon_for_delta(1e-5) <= 1.0 + 1e-3
    assert plan.event.epsilon(delta=1e-5) <= 1.0 + 1e-9
    assert plan.layout.release_part.num_chunks == len(records) // 4 // 2

    out = tmp_path / "v.safetensors"
    build_task_vector(tiny_llava, records, None, settings, out=out)
    metadata = load_task_vector(out).metadata  # the load re-derives the claim
    details = metadata.head_selection["details"]
    assert details["composition"] == "parallel" and details["epsilon_selection"] == 1.0
    assert details["utility"] == "noisy-probability" and len(details["release_noise_std"]) == 21
    assert details["candidates"][details["chosen"]] == metadata.heads
    assert [type(e).__name__ for e in event_from_json(metadata.privacy.accounting_events).events] == [
        "DiscreteLaplaceDpEvent",
        "GaussianDpEvent",
    ]
    from tests.artifact.test_artifact_claims import _edited

    def sequential(document):  # the release half's σ claimed for a selection composed in series
        document["head_selection"]["details"]["composition"] = "sequential"

    forged = _edited(out, tmp_path / "forged.safetensors", sequential, rehash=True)
    with pytest.raises(ArtifactIntegrityError, match=r"privacy\."):
        load_task_vector(forged)
