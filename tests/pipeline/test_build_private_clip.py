"""--l2-clip-norm private in the library: the build clips at c·g_l with c chosen by one ε_clip-DP
round on the release chunks' own norms, its event is charged before that round and composed
into the one accounted event, and the artifact's claim re-derives it."""

from __future__ import annotations

import json
import math
from dataclasses import replace

import numpy as np
import pytest
from dp_accounting.pld import common
from dp_accounting.pld import privacy_loss_distribution as pld_lib

from dpmtv.artifact.vector import load_task_vector
from dpmtv.data import load_records
from dpmtv.errors import ArtifactIntegrityError, ParameterError
from dpmtv.heads import parse_head_spec
from dpmtv.pipeline.build import BuildSettings, build_task_vector, build_task_vectors_for_epsilons
from dpmtv.pipeline.plan import plan_layout
from dpmtv.pipeline.reference import public_layer_scales
from dpmtv.pipeline.settings import PrivateClipSettings
from dpmtv.pipeline.tasks import iter_centered_chunks
from dpmtv.privacy import derive_insecure_seed, epsilon_of, event_from_json, seeded_rng
from dpmtv.privacy.clip_quantile import private_clip_multiplier

CLIP = PrivateClipSettings(epsilon_fraction=0.2)
SETTINGS = BuildSettings(
    epsilon=1.0, delta=1e-5, l2_clip_norm=(1.0,), shots_per_chunk=4, progress=False, private_clip=CLIP
)


def _heads(tiny_llava):
    return parse_head_spec("layers:0-1", tiny_llava.adapter.geometry)


def test_the_build_clips_at_the_multiplier_a_seeded_round_picks_from_the_chunks_own_norms(
    tiny_llava, records_file, tmp_path
):
    records, heads = load_records(records_file), _heads(tiny_llava)
    settings = replace(SETTINGS, insecure_seed=7, allow_insecure_seed=True)
    result = build_task_vector(tiny_llava, records, heads, settings, out=tmp_path / "v.safetensors")
    p = load_task_vector(result.path).metadata.privacy
    chosen = p.clip_norm_selection
    scales = public_layer_scales(tiny_llava, heads, settings)
    assert chosen["layer_scales"] == pytest.approx([scales[layer] for layer in heads.layers])
    assert p.l2_clip_norm == pytest.approx([chosen["multiplier"] * g for g in chosen["layer_scales"]])
    # the same round, redone here from the chunks' own (unclipped) vectors
    layout = plan_layout(tiny_llava, records, heads, settings)
    dims = {
        layer: len(heads.heads_in(layer)) * tiny_llava.adapter.geometry.head_dim for layer in heads.layers
    }
    reference = {layer: np.zeros(dims[layer]) for layer in heads.layers}
    rows = list(iter_centered_chunks(tiny_llava, records, layout.release_part, heads, settings, reference))
    norms = np.array([[np.linalg.norm(r[layer]) for layer in heads.layers] for r in rows])
    redone = private_clip_multiplier(
        norms,
        layer_scales=chosen["layer_scales"],
        candidates=CLIP.multipliers,
        epsilon=0.2,
        utility=CLIP.utility,
        tolerance=CLIP.tolerance,
        rng=seeded_rng(derive_insecure_seed(7, "private-clip-norm")),
    )
    assert chosen["multiplier"] == redone
    assert p.l2_sensitivity == pytest.approx(2 * math.sqrt(sum(c * c for c in p.l2_clip_norm)) / p.num_chunks)


def test_the_clip_round_is_composed_into_the_one_charged_event(tiny_llava, records_file, tmp_path):
    charged = []
    result = build_task_vector(
        tiny_llava, load_records(records_file), _heads(tiny_llava), SETTINGS, before_noise=charged.append
    )
    p = result.vector.metadata.privacy
    assert len(charged) == 1 and json.dumps(p.accounting_events, sort_keys=True)
    event = event_from_json(p.accounting_events)
    # the composition of the pure 0.2-DP round and the Gaussian, by dp-accounting directly
    pure = pld_lib.from_privacy_parameters(common.DifferentialPrivacyParameters(0.2, 0.0))
    gaussian = pld_lib.from_gaussian_mechanism(p.noise_multiplier, value_discretization_interval=1e-4)
    direct = pure.compose(gaussian).get_epsilon_for_delta(1e-5)
    assert epsilon_of(event, delta=1e-5) == pytest.approx(direct, rel=2e-3)
    assert p.epsilon_spent <= 1.0
    # the release spends less than the whole budget: its σ is that of ε < 1
    alone = BuildSettings(epsilon=1.0, delta=1e-5, l2_clip_norm=(1.0,), shots_per_chunk=4, progress=False)
    plain = build_task_vector(tiny_llava, load_records(records_file), _heads(tiny_llava), alone)
    assert p.noise_multiplier > plain.vector.metadata.privacy.noise_multiplier


def test_a_claim_with_an_edited_multiplier_or_share_is_refused(tiny_llava, records_file, tmp_path):
    result = build_task_vector(
        tiny_llava, load_records(records_file), _heads(tiny_llava), SETTINGS, out=tmp_path / "v.safetensors"
    )
    from dpmtv.artifact.claim import check_privacy_claim

    metadata = result.vector.metadata
    check_privacy_claim(metadata.privacy, head_selection=metadata.head_selection, where="v")
    edits = (
        ("multiplier", 1.2345),
        ("epsilon_fraction", 0.5),
        ("epsilon", 0.3),
        ("utility", "median"),
        ("tolerance", 1.0),
        ("tolerance", "wide"),
    )
    for field, value in edits:
        edited = metadata.privacy.model_copy(
            update={"clip_norm_selection": {**metadata.privacy.clip_norm_selection, field: value}}
        )
        with pytest.raises(ArtifactIntegrityError, match="clip_norm_selection|l2_clip_norm"):
            check_privacy_claim(edited, head_selection=metadata.head_selection, where="v")
    dropped = metadata.privacy.model_copy(update={"clip_norm_selection": None})
    with pytest.raises(ArtifactIntegrityError, match="accounting_events"):
        check_privacy_claim(dropped, head_selection=metadata.head_selection, where="v")


def test_settings_refuse_bad_shares_and_one_extraction_for_several_epsilons(tiny_llava, records_file):
    with pytest.raises(ParameterError, match="clip-epsilon-fraction"):
        PrivateClipSettings(epsilon_fraction=1.0)
    with pytest.raises(ParameterError, match="non-private"):
        replace(SETTINGS, non_private=True, epsilon=math.inf)
    seeded = replace(SETTINGS, insecure_seed=1, allow_insecure_seed=True)
    with pytest.raises(ParameterError, match="clip norm"):
        build_task_vectors_for_epsilons(
            tiny_llava, load_records(records_file), _heads(tiny_llava), seeded, epsilons=(1.0, 2.0)
        )


def test_a_round_too_weak_for_its_chunks_is_warned_from_public_numbers():
    from dpmtv.pipeline.plan import private_clip_notes
    from dpmtv.privacy.clip_quantile import clip_choice_score_tolerance

    # McSherry-Talwar: (2·Δ∞/ε)·ln(K/β) with Δ∞ = 2 (median), K = 49 multipliers, β = 0.05
    tolerance = clip_choice_score_tolerance(epsilon=0.1, candidates=CLIP.multipliers, alpha=0.5)
    assert tolerance == pytest.approx(2 * 2 / 0.1 * math.log(49 / 0.05))
    weak = replace(SETTINGS, private_clip=PrivateClipSettings(epsilon_fraction=0.1, utility="quantile"))
    with pytest.warns(UserWarning, match="private round is weak"):
        assert private_clip_notes(weak, 256)  # 276 > 256 / 2
    strong = replace(SETTINGS, private_clip=PrivateClipSettings(epsilon_fraction=0.5, utility="quantile"))
    assert private_clip_notes(strong, 256) == []  # 55 < 128
    # the log-loss: Δ∞ one unit of a range of m units; (2/ε)·ln(K/β) chunks against m/2
    log_loss = clip_choice_score_tolerance(
        epsilon=0.2, candidates=CLIP.multipliers, alpha=0.5, utility="log-loss"
    )
    assert log_loss == pytest.approx(2 * 1000 / 0.2 * math.log(49 / 0.05))
    at = {
        f: replace(SETTINGS, private_clip=PrivateClipSettings(epsilon_fraction=f, utility="log-loss"))
        for f in (0.1, 0.2)
    }
    with pytest.warns(UserWarning, match="private round is weak"):
        assert private_clip_notes(at[0.1], 256)  # 138 chunks > 128
    assert private_clip_notes(at[0.2], 256) == []  # 69 < 128


def test_a_blank_centering_reference_and_the_layer_scales_share_one_forward_pass(tiny_llava, monkeypatch):
    """With ``--center blank`` the reference prompt is the scale prompt: one pass serves both,
    bitwise as the two separate computations."""
    from dpmtv.pipeline import reference as reference_module

    heads = _heads(tiny_llava)
    settings = replace(SETTINGS, center="blank")
    expected_scales = public_layer_scales(tiny_llava, heads, settings)
    expected_centering = reference_module.reference_activations(tiny_llava, heads, settings)
    passes = []
    real = reference_module.mean_selected_heads
    monkeypatch.setattr(
        reference_module, "mean_selected_heads", lambda *a, **k: passes.append(1) or real(*a, **k)
    )
    public = reference_module.public_reference(tiny_llava, heads, settings)
    assert len(passes) == 1
    assert public.layer_scales == expected_scales
    for layer in heads.layers:
        np.testing.assert_array_equal(public.centering[layer], expected_centering[layer])
