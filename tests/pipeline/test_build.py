"""End to end on a tiny random-weight LLaVA: build, artifact round trip, apply, bad input."""

import math

import numpy as np
import pytest
import torch

from dpmtv.artifact.vector import load_task_vector
from dpmtv.data import load_records
from dpmtv.data.prompts import Example, zero_shot
from dpmtv.errors import (
    DangerousModeError,
    NumericalError,
    ParameterError,
    RecordError,
)
from dpmtv.heads import parse_head_spec
from dpmtv.inference import answer_queries, apply
from dpmtv.pipeline.build import BuildSettings, build_task_vector
from dpmtv.privacy import epsilon_of, event_from_json
from tests.conftest import write_records

SETTINGS = BuildSettings(epsilon=1.0, delta=1e-5, l2_clip_norm=(2.0,), shots_per_chunk=4, progress=False)


def _build(tiny_llava, records_file, tmp_path, settings=SETTINGS, heads="layers:0-1"):
    records = load_records(records_file)
    head_set = parse_head_spec(heads, tiny_llava.adapter.geometry)
    return build_task_vector(tiny_llava, records, head_set, settings, out=tmp_path / "task.safetensors")


def test_build_writes_a_private_artifact_that_round_trips(tiny_llava, records_file, tmp_path):
    result = _build(tiny_llava, records_file, tmp_path)
    loaded = load_task_vector(result.path)
    p = loaded.metadata.privacy
    assert p.private and p.epsilon == 1.0 and p.delta == 1e-5
    assert p.num_chunks == 6 and p.shots_per_chunk == 4 and p.num_unused_records == 0
    geometry = tiny_llava.adapter.geometry
    # Δ = 2·C·√L'/m with L' = 2 released layers, m = 6 chunks
    assert p.l2_sensitivity == pytest.approx(2 * 2.0 * math.sqrt(2) / 6)
    assert p.noise_std >= p.noise_std_analytic > 0
    assert p.epsilon_spent <= 1.0
    assert epsilon_of(event_from_json(p.accounting_events), delta=1e-5) == pytest.approx(p.epsilon_spent)
    assert loaded.values.shape == (2 * geometry.num_heads, geometry.head_dim)
    np.testing.assert_array_equal(loaded.values, result.vector.values)
    assert loaded.metadata.model["attention_weights_sha256"]


def test_artifact_holds_nothing_private_but_the_noised_vector(tiny_llava, records_file, tmp_path):
    result = _build(tiny_llava, records_file, tmp_path)
    from safetensors.numpy import load_file

    assert set(load_file(str(result.path))) == {"vector", "heads"}
    text = result.vector.metadata.model_dump_json()
    assert "rec-" not in text and "What is shown" not in text and "thing" not in text


def test_noise_is_actually_added(tiny_llava, records_file, tmp_path):
    noisy = _build(tiny_llava, records_file, tmp_path).vector.values
    exact = _build(
        tiny_llava,
        records_file,
        tmp_path,
        BuildSettings(
            epsilon=1.0, delta=1e-5, l2_clip_norm=(2.0,), shots_per_chunk=4, non_private=True, progress=False
        ),
    ).vector
    assert not exact.metadata.privacy.private and exact.metadata.privacy.noise_std == 0
    residual = (noisy - exact.values).ravel()
    sigma = _build(tiny_llava, records_file, tmp_path).vector.metadata.privacy.noise_std
    # The partition differs between builds, so compare scales only: noise dominates here.
    assert residual.std() > 0.3 * sigma


def test_seeded_build_is_reproducible_and_marked_insecure(tiny_llava, records_file, tmp_path):
    settings = BuildSettings(
        epsilon=1.0,
        delta=1e-5,
        l2_clip_norm=(2.0,),
        shots_per_chunk=4,
        progress=False,
        noise_sampler="csprng-numpy",
        insecure_seed=7,
        allow_insecure_seed=True,
    )
    first = _build(tiny_llava, records_file, tmp_path, settings).vector
    second = _build(tiny_llava, records_file, tmp_path, settings).vector
    np.testing.assert_allclose(first.values, second.values, atol=1e-5)
    assert first.metadata.privacy.insecure_seed == 7 and not first.metadata.privacy.secure_noise


def test_apply_patches_logits_and_answers(tiny_llava, records_file, tmp_path):
    vector = load_task_vector(_build(tiny_llava, records_file, tmp_path).path)
    record = load_records(records_file)[0]
    query = Example(record.load_images(), record.question)
    inputs = tiny_llava.adapter.encode([zero_shot(query)])
    with torch.no_grad():
        plain = tiny_llava.model(**inputs).logits[:, -1]
        with apply(tiny_llava, vector):
            patched = tiny_llava.model(**inputs).logits[:, -1]
        again = tiny_llava.model(**inputs).logits[:, -1]
    assert not torch.allclose(plain, patched)
    assert torch.equal(plain, again)  # hooks removed
    answers = answer_queries(tiny_llava, [query, query], vector=vector, max_new_tokens=3)
    assert len(answers) == 2 and answers[0] == answers[1]


def test_add_remove_one_uses_public_num_chunks(tiny_llava, records_file, tmp_path):
    settings = BuildSettings(
        epsilon=2.0,
        delta=1e-5,
        l2_clip_norm=(1.0,),
        shots_per_chunk=6,
        progress=False,
        neighbouring_relation="add-remove-one",
        num_chunks=5,
    )
    p = _build(tiny_llava, records_file, tmp_path, settings).vector.metadata.privacy
    assert p.num_chunks == 5 and p.num_records is None and p.neighbouring_relation == "add-remove-one"
    assert p.l2_sensitivity == pytest.approx(2 * 1.0 * math.sqrt(2) / 5)


def test_add_remove_one_needs_record_ids(tiny_llava, tmp_path):
    path = write_records(tmp_path / "noids", 8, with_ids=False)
    settings = BuildSettings(
        epsilon=1.0,
        delta=1e-5,
        l2_clip_norm=(1.0,),
        shots_per_chunk=4,
        progress=False,
        neighbouring_relation="add-remove-one",
        num_chunks=2,
    )
    with pytest.raises(RecordError, match="field 'id' is missing"):
        _build(tiny_llava, path, tmp_path, settings)
    assert not (tmp_path / "task.safetensors").exists()


def test_centering_on_a_blank_reference_is_recorded(tiny_llava, records_file, tmp_path):
    settings = BuildSettings(
        epsilon=1.0,
        delta=1e-5,
        l2_clip_norm=(2.0,),
        shots_per_chunk=4,
        progress=False,
        center="blank",
        query="blank",
    )
    vector = load_task_vector(_build(tiny_llava, records_file, tmp_path, settings).path)
    assert vector.reference is not None and vector.reference.shape == vector.values.shape
    assert vector.metadata.prompt["center"] == "blank" and vector.metadata.prompt["query"] == "blank"


@pytest.mark.parametrize(
    ("settings", "error", "message"),
    [
        (dict(epsilon=0.0), ParameterError, "epsilon must be > 0"),
        (dict(epsilon=-1.0), ParameterError, "epsilon must be > 0"),
        (dict(delta=1.0), ParameterError, "delta"),
        (dict(delta=0.0), ParameterError, "delta"),
        (dict(shots_per_chunk=100), ParameterError, "100"),
        (dict(l2_clip_norm=(1.0, 2.0, 3.0)), ParameterError, "expected"),
        (dict(l2_clip_norm=(-1.0,)), ParameterError, "layer"),
        (dict(insecure_seed=3), DangerousModeError, "--insecure-seeded-noise"),
    ],
)
def test_bad_parameters_fail_clearly_and_write_nothing(
    tiny_llava, records_file, tmp_path, settings, error, message
):
    base = dict(epsilon=1.0, delta=1e-5, l2_clip_norm=(2.0,), shots_per_chunk=4, progress=False)
    with pytest.raises(error, match=message):
        _build(tiny_llava, records_file, tmp_path, BuildSettings(**{**base, **settings}))
    assert list(tmp_path.glob("task.safetensors*")) == [] and list(tmp_path.glob(".task*")) == []


def test_nan_activation_is_named_and_writes_nothing(tiny_llava, records_file, tmp_path):
    def poison(module, args):
        hidden = args[0].clone()
        hidden[:, -1, 0] = float("nan")
        return (hidden,)

    handle = tiny_llava.adapter.o_projs[1].register_forward_pre_hook(poison)
    try:
        with pytest.raises(NumericalError, match="layer 1"):
            _build(tiny_llava, records_file, tmp_path)
    finally:
        handle.remove()
    assert list(tmp_path.glob("*task*")) == []


def test_before_noise_is_called_once_with_the_build_event(tiny_llava, records_file, tmp_path):
    from dpmtv.privacy import epsilon_of

    events = []
    result = build_task_vector(
        tiny_llava,
        load_records(records_file),
        parse_head_spec("layers:0", tiny_llava.adapter.geometry),
        SETTINGS,
        out=tmp_path / "t.safetensors",
        before_noise=events.append,
    )
    assert len(events) == 1 and result.charged_event is events[0]
    assert epsilon_of(events[0], delta=1e-5) == pytest.approx(result.vector.metadata.privacy.epsilon_spent)


def test_a_refused_charge_draws_no_noise_and_writes_nothing(tiny_llava, records_file, tmp_path, monkeypatch):
    import dpmtv.privacy.release as release_module
    from dpmtv.errors import BudgetExceededError

    def no_noise(*args, **kwargs):
        raise AssertionError("noise drawn after a refused charge")

    def refuse(event):
        raise BudgetExceededError("over budget")

    monkeypatch.setattr(release_module, "add_gaussian_noise", no_noise)
    with pytest.raises(BudgetExceededError):
        build_task_vector(
            tiny_llava,
            load_records(records_file),
            parse_head_spec("layers:0", tiny_llava.adapter.geometry),
            SETTINGS,
            out=tmp_path / "t.safetensors",
            before_noise=refuse,
        )
    assert list(tmp_path.glob("*.safetensors")) == []


@pytest.mark.parametrize("composition", ["sequential", "parallel"])
def test_private_selection_composes_into_the_budget(tiny_llava, records_file, tmp_path, composition):
    import dp_accounting

    from dpmtv.pipeline.build import PrivateSelectionSettings
    from dpmtv.privacy import VALUE_DISCRETIZATION_INTERVAL, epsilon_of

    events = []
    settings = BuildSettings(
        epsilon=4.0,
        delta=1e-5,
        l2_clip_norm=(1.0,),
        shots_per_chunk=4,
        progress=False,
        private_selection=PrivateSelectionSettings(k=3, composition=composition),
    )
    result = build_task_vector(
        tiny_llava,
        load_records(records_file),
        None,
        settings,
        out=tmp_path / "t.safetensors",
        before_noise=events.append,
    )
    vector = load_task_vector(result.path)
    p = vector.metadata.privacy
    assert len(vector.heads) == 3 and vector.metadata.head_selection["method"] == "private-noisy-top-k"
    m = 6 if composition == "sequential" else 3  # 24 records / 4 per chunk; parallel: one half
    assert p.num_chunks == m
    # Δ is the worst case over the layers 3 heads can occupy (the tiny model has 2 layers).
    assert p.l2_sensitivity == pytest.approx(2 * 1.0 * math.sqrt(2) / m)
    assert p.epsilon_spent <= 4.0
    if composition == "sequential":
        charged = epsilon_of(events[0], delta=1e-5)
        assert charged == pytest.approx(p.epsilon_spent) and p.epsilon_spent > 3.9
    else:  # disjoint halves: the worse of the two, never their composition
        charged = events[0].epsilon(delta=1e-5)
        alone = [epsilon_of(event, delta=1e-5) for event in events[0].alternatives]
        both = epsilon_of(dp_accounting.ComposedDpEvent(list(events[0].alternatives)), delta=1e-5)
        assert charged == max(alone) < both
        assert any(p.epsilon_spent == pytest.approx(value, rel=1e-9) for value in alone)
        # the selection is pure 4-DP; the pessimistic PLD adds at most one 1e-3 step per round
        assert charged <= 4.0 + 3 * VALUE_DISCRETIZATION_INTERVAL


def test_private_selection_charges_before_the_selection_noise(
    tiny_llava, records_file, tmp_path, monkeypatch
):
    import dpmtv.pipeline.release as release_module
    from dpmtv.errors import BudgetExceededError
    from dpmtv.pipeline.build import PrivateSelectionSettings

    def no_selection(*args, **kwargs):
        raise AssertionError("selection noise drawn before the charge")

    monkeypatch.setattr(release_module, "select_private", no_selection)
    settings = BuildSettings(
        epsilon=4.0,
        delta=1e-5,
        l2_clip_norm=(1.0,),
        shots_per_chunk=4,
        progress=False,
        private_selection=PrivateSelectionSettings(k=2),
    )

    def refuse(event):
        raise BudgetExceededError("over budget")

    with pytest.raises(BudgetExceededError):
        build_task_vector(tiny_llava, load_records(records_file), None, settings, before_noise=refuse)
