"""Membership inference: metrics on known score sets, scoring against a direct forward, the attack
and its report on the tiny random LLaVA, and ``dpmtv attack`` through click's runner."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest
import torch
from click.testing import CliRunner
from scipy import stats

from dpmtv.audit.membership import (
    AttackSettings,
    answer_log_probs,
    answer_token_ids,
    attack_metrics,
    bootstrap_auc_interval,
    embedded_membership_data,
    public_clip_norms,
    randomise_labels,
    roc_auc,
    roc_curve,
    run_membership_attack,
    tpr_at_fpr,
)
from dpmtv.audit.membership.scoring import _teacher_forced
from dpmtv.cli import main
from dpmtv.data import load_records
from dpmtv.data.prompts import Example, Prompt, zero_shot
from dpmtv.errors import ParameterError, RecordError
from dpmtv.forward.extract import extract_selected_heads
from dpmtv.heads import parse_head_spec
from dpmtv.pipeline.build import BuildSettings
from tests.conftest import write_records


# ---- metrics --------------------------------------------------------------------------------
def test_auc_of_a_known_score_set():
    # pairs (member > non-member): 3 beats 1, 2 (not 3.5); 4 and 5 beat all three: 8 of 9
    assert roc_auc([3, 4, 5], [1, 2, 3.5]) == pytest.approx(8 / 9)
    # ties count one half: (1 vs 2: 0) (1 vs 0: 1) (2 vs 2: 0.5) (2 vs 0: 1) -> 2.5 / 4
    assert roc_auc([1, 2], [2, 0]) == pytest.approx(0.625)
    assert roc_auc([5, 6], [1, 2]) == 1.0
    assert roc_auc([1, 2], [5, 6]) == 0.0
    assert roc_auc([1, 1, 1], [1, 1]) == 0.5


def test_auc_is_the_area_under_the_roc_curve():
    rng = np.random.default_rng(0)
    members = np.round(rng.normal(0.5, 1, 57), 1)  # rounded: many ties
    others = np.round(rng.normal(0, 1, 43), 1)
    fpr, tpr, thresholds = roc_curve(members, others)
    assert (fpr[0], tpr[0], thresholds[0]) == (0.0, 0.0, np.inf)
    assert (fpr[-1], tpr[-1]) == (1.0, 1.0)
    assert np.all(np.diff(fpr) >= 0) and np.all(np.diff(tpr) >= 0)
    area = float(np.sum(np.diff(fpr) * (tpr[1:] + tpr[:-1]) / 2))  # trapezoids: ties are diagonals
    assert roc_auc(members, others) == pytest.approx(area)
    u = stats.mannwhitneyu(members, others).statistic
    assert roc_auc(members, others) == pytest.approx(u / (57 * 43))


def test_tpr_at_one_percent_fpr():
    non_members = np.arange(100) / 100  # 0.00 .. 0.99
    members = [2.0, 1.5, 0.985, 0.5]
    # t = 0.985 lets one non-member (0.99) through, FPR 1/100, and three members: TPR 0.75
    assert tpr_at_fpr(members, non_members, 0.01) == pytest.approx((0.75, 0.01, 0.985))
    # no false positive allowed: only the members above 0.99
    assert tpr_at_fpr(members, non_members, 0.0) == pytest.approx((0.5, 0.0, 1.5))


def test_tpr_at_fpr_with_few_non_members_is_tpr_at_zero_false_positives():
    non_members = np.linspace(0, 1, 64)  # the smallest non-zero FPR is 1/64 > 1%
    members = [5.0, 1.2, 1.0, 0.3]
    tpr, fpr, threshold = tpr_at_fpr(members, non_members, 0.01)
    assert (tpr, fpr, threshold) == (0.5, 0.0, 1.2)
    # nothing above every non-member: the t = +inf test, TPR 0
    assert tpr_at_fpr([0.5], non_members, 0.01) == (0.0, 0.0, np.inf)


def test_bootstrap_interval_contains_the_auc_and_is_reproducible():
    rng = np.random.default_rng(1)
    members, others = rng.normal(1, 1, 80), rng.normal(0, 1, 70)
    low, high = bootstrap_auc_interval(members, others, resamples=500, rng=np.random.default_rng(5))
    assert low < roc_auc(members, others) < high
    assert (low, high) == bootstrap_auc_interval(members, others, resamples=500, rng=np.random.default_rng(5))
    wide = bootstrap_auc_interval(members[:10], others[:10], resamples=500, rng=np.random.default_rng(5))
    assert wide[1] - wide[0] > high - low
    with pytest.raises(ParameterError, match="confidence"):
        bootstrap_auc_interval(members, others, confidence=1.0)


def test_attack_metrics_summarise_one_attack():
    members, others = np.arange(10, 20.0), np.arange(0, 10.0)
    metrics = attack_metrics(members, others, target="icl", resamples=100, rng=np.random.default_rng(0))
    assert (metrics.auc, metrics.tpr_at_fpr, metrics.achieved_fpr) == (1.0, 1.0, 0.0)
    assert (metrics.num_members, metrics.num_non_members, metrics.target) == (10, 10, "icl")
    assert metrics.p_value < 1e-4
    assert attack_metrics(others, members, resamples=100).p_value > 0.99
    with pytest.raises(ParameterError, match="NaN"):
        attack_metrics([np.nan], [1.0])


# ---- records ---------------------------------------------------------------------------------
def test_randomise_labels_draws_uniformly_and_keeps_the_rest(tmp_path):
    records = load_records(write_records(tmp_path, 4))
    assert (
        randomise_labels(records, vocabulary=["a", "b"], noise=0.0, rng=np.random.default_rng(0)) == records
    )
    many = records * 500
    noisy = randomise_labels(many, vocabulary=["a", "b"], noise=1.0, rng=np.random.default_rng(0))
    count = sum(r.answer == "a" for r in noisy)
    assert {r.answer for r in noisy} == {"a", "b"}
    # two-sided binomial test at alpha = 1e-6: a correct sampler fails it once in a million runs
    assert stats.binomtest(count, len(noisy), 0.5).pvalue > 1e-6
    assert [r.images for r in noisy] == [r.images for r in many]
    with pytest.raises(ParameterError, match="label noise"):
        randomise_labels(records, vocabulary=["a", "b"], noise=1.5, rng=np.random.default_rng(0))


def test_embedded_membership_data_is_disjoint_randomised_and_reproducible():
    pytest.importorskip("dpmtv.embedded.generator")
    data = embedded_membership_data("name_colour", num_members=5, num_non_members=7, num_public=4, seed=3)
    assert (len(data.members), len(data.non_members), len(data.public)) == (5, 7, 4)
    ids = [r.record_id for r in (*data.members, *data.non_members, *data.public)]
    assert len(set(ids)) == len(ids)
    assert {r.answer for r in (*data.members, *data.non_members)} <= {"red", "green", "blue", "yellow"}
    again = embedded_membership_data("name_colour", num_members=5, num_non_members=7, num_public=4, seed=3)
    assert [r.answer for r in again.members] == [r.answer for r in data.members]
    with pytest.raises(ParameterError, match="unknown embedded task"):
        embedded_membership_data("nope", num_members=1, num_non_members=1)


# ---- scoring on the tiny LLaVA ----------------------------------------------------------------
@pytest.fixture(scope="module")
def tiny_records(tmp_path_factory):
    folder = tmp_path_factory.mktemp("membership")
    members = load_records(write_records(folder / "members", 6, seed=1))
    non_members = load_records(write_records(folder / "others", 6, seed=2, with_ids=False))
    return members, non_members


def _direct_log_prob(adapter, prompt: Prompt, answer: str) -> float:
    """One full forward of prompt + answer tokens, no cache."""
    inputs = adapter.encode([prompt])
    tokens = torch.tensor([answer_token_ids(adapter, prompt, answer)])
    ids = torch.cat([inputs["input_ids"], tokens], dim=1)
    mask = torch.cat([inputs["attention_mask"], torch.ones_like(tokens)], dim=1)
    with torch.no_grad():
        logits = adapter.model(input_ids=ids, attention_mask=mask, pixel_values=inputs["pixel_values"]).logits
    log_probs = torch.log_softmax(logits[0, -tokens.shape[1] - 1 : -1].float(), dim=-1)
    return float(log_probs.gather(1, tokens[0][:, None]).sum())


def test_answer_tokens_are_what_follows_the_generation_prompt(tiny_llava, tiny_records):
    adapter = tiny_llava.adapter
    record = tiny_records[0][0]
    tokens = answer_token_ids(adapter, zero_shot(Example(record.load_images(), record.question)), "thing 0")
    assert adapter.tokenizer.decode(tokens).strip() == "thing 0"


def test_cached_scoring_matches_a_full_forward_and_batching(tiny_llava, tiny_records):
    members, _ = tiny_records
    demo = Example(members[0].load_images(), members[0].question, members[0].answer)
    prompts = [
        zero_shot(Example(members[1].load_images(), "What?")),
        Prompt((demo,), Example(members[2].load_images(), "What is shown here, exactly?")),
        zero_shot(Example(members[3].load_images(), "And this?")),
    ]
    # the first two share an answer length (one left-padded batch), the third has its own
    answers = ["thing 1", "thing 2", "a much longer answer"]
    batched, _ = answer_log_probs(tiny_llava, prompts, answers, batch_size=2)
    direct = [_direct_log_prob(tiny_llava.adapter, p, a) for p, a in zip(prompts, answers)]
    assert batched == pytest.approx(direct, abs=1e-3)


def test_scoring_with_a_vector_is_what_apply_gives(tiny_llava, tiny_records):
    from dpmtv.inference import apply
    from dpmtv.pipeline.build import build_task_vector

    members, _ = tiny_records
    heads = parse_head_spec("layers:0", tiny_llava.adapter.geometry)
    settings = BuildSettings(
        epsilon=1.0, delta=1e-5, l2_clip_norm=(0.5,), shots_per_chunk=3, non_private=True, progress=False
    )
    vector = build_task_vector(tiny_llava, members, heads, settings).vector
    prompts = [zero_shot(Example(r.load_images(), r.question)) for r in members]
    answers = [r.answer for r in members]
    plain, _ = answer_log_probs(tiny_llava, prompts, answers)
    patched, _ = answer_log_probs(tiny_llava, prompts, answers, vector=vector)
    assert not np.allclose(plain, patched)
    # reference: transformers' own decoding loop under the same hooks (every-call patching)
    adapter = tiny_llava.adapter
    inputs = adapter.encode(prompts[:1])
    with torch.no_grad(), apply(tiny_llava, vector):
        out = adapter.model.generate(
            **inputs,
            max_new_tokens=3,
            min_new_tokens=3,
            do_sample=False,
            output_logits=True,
            return_dict_in_generate=True,
            pad_token_id=adapter.tokenizer.pad_token_id,
        )
        tokens = out.sequences[:, inputs["input_ids"].shape[1] :]  # (1, 3)
        got, _ = _teacher_forced(adapter, prompts[:1], tokens)
    expected = sum(
        float(torch.log_softmax(logits[0].float(), dim=-1)[tokens[0, step]])
        for step, logits in enumerate(out.logits)
    )
    assert got[0] == pytest.approx(expected, abs=1e-4)


def test_public_clip_norms_are_per_layer_quantiles(tiny_llava, tiny_records):
    public, _ = tiny_records
    heads = parse_head_spec("layers:0-1", tiny_llava.adapter.geometry)
    norms = public_clip_norms(tiny_llava, public, heads, shots_per_chunk=2, quantile=1.0)
    assert len(norms) == 2 and all(c > 0 for c in norms)
    from dpmtv.data.prompts import chunk_prompt

    prompts = [chunk_prompt(public[i : i + 2], query="record", query_question="") for i in (0, 2, 4)]
    values = extract_selected_heads(tiny_llava.adapter, prompts, heads)
    assert norms[1] == pytest.approx(np.linalg.norm(values[1], axis=1).max())


# ---- the attack and its report ------------------------------------------------------------------
def _attack(heads, **overrides) -> AttackSettings:
    options = {"bootstrap_resamples": 50, "progress": False, **overrides}
    return AttackSettings(build=_settings(), heads=heads, **options)


def _settings(**changes) -> BuildSettings:
    base = BuildSettings(
        epsilon=1.0,
        delta=1e-5,
        l2_clip_norm=(0.5,),
        shots_per_chunk=3,
        noise_sampler="csprng-numpy",
        progress=False,
    )
    return dataclasses.replace(base, **changes)


def test_attack_reports_every_target_and_writes_outputs(tiny_llava, tiny_records, tmp_path):
    members, non_members = tiny_records
    heads = parse_head_spec("layers:0", tiny_llava.adapter.geometry)
    report = run_membership_attack(
        tiny_llava,
        members,
        non_members,
        _attack(heads, icl_shots=4, non_private_mtv=True, seed=0),
    )
    assert [t.name for t in report.targets] == ["zero-shot", "icl", "dp-mtv", "mtv"]
    assert [(m.target, m.statistic) for m in report.metrics] == [
        ("zero-shot", "logprob"),
        ("icl", "logprob"),
        ("icl", "calibrated"),
        ("dp-mtv", "logprob"),
        ("dp-mtv", "calibrated"),
        ("mtv", "logprob"),
        ("mtv", "calibrated"),
    ]
    icl = report.target("icl")
    assert icl.details["prompts"] == 2 and icl.details["shots_per_prompt_max"] == 3  # 6 members, cap 4
    assert report.target("dp-mtv").private and not report.target("mtv").private
    assert report.target("dp-mtv").details["epsilon"] == 1.0
    for metric in report.metrics:
        target = report.target(metric.target)
        if metric.statistic == "logprob":
            assert metric.auc == pytest.approx(roc_auc(target.member_logp, target.non_member_logp))
        assert (metric.num_members, metric.num_non_members) == (6, 6)
    paths = report.write(tmp_path / "out")
    saved = json.loads(paths["json"].read_text())
    assert saved["settings"]["num_members"] == 6 and len(saved["metrics"]) == 7
    assert len(saved["targets"][1]["member_logp"]) == 6
    markdown = paths["markdown"].read_text()
    assert "| target | statistic | AUC |" in markdown and "NON-PRIVATE" in markdown
    assert paths["plot"].read_bytes()[:4] == b"\x89PNG"


def test_shadow_statistic_subtracts_the_target_rebuilt_from_public_records(
    tiny_llava, tiny_records, tmp_path
):
    members, non_members = tiny_records
    shadow = load_records(write_records(tmp_path / "public", 7, seed=9, with_ids=False))
    heads = parse_head_spec("layers:0", tiny_llava.adapter.geometry)
    report = run_membership_attack(
        tiny_llava,
        members,
        non_members,
        _attack(heads, seed=1),
        shadow=shadow,
    )
    assert [(m.target, m.statistic) for m in report.metrics] == [
        ("zero-shot", "logprob"),
        *[(target, s) for target in ("icl", "dp-mtv") for s in ("logprob", "calibrated", "shadow")],
    ]
    for name in ("icl", "dp-mtv"):
        target = report.target(name)
        assert target.member_shadow.shape == (6,) and target.non_member_shadow.shape == (6,)
        expected = roc_auc(
            target.member_logp - target.member_shadow, target.non_member_logp - target.non_member_shadow
        )
        assert report.metric(name, "shadow").auc == pytest.approx(expected)
    # the shadow ICL prompts hold other demonstrations: the same queries score differently
    icl = report.target("icl")
    assert not np.allclose(icl.member_logp, icl.member_shadow)
    with pytest.raises(RecordError, match="shadow"):
        run_membership_attack(tiny_llava, members, non_members, _attack(heads), shadow=shadow[:3])


def test_attack_refuses_overlapping_or_empty_sets(tiny_llava, tiny_records):
    members, non_members = tiny_records
    heads = parse_head_spec("layers:0", tiny_llava.adapter.geometry)
    with pytest.raises(RecordError, match="both a member and a non-member"):
        run_membership_attack(tiny_llava, members, members[:2], _attack(heads))
    with pytest.raises(RecordError, match="no non-member"):
        run_membership_attack(tiny_llava, members, [], _attack(heads))
    with pytest.raises(ParameterError, match="target FPR"):
        run_membership_attack(tiny_llava, members, non_members, _attack(heads, target_fpr=0.0))


# ---- CLI ----------------------------------------------------------------------------------------
def test_cli_files_mode_end_to_end(tiny_llava_path, tmp_path):
    members = write_records(tmp_path / "members", 6, seed=1)
    others = write_records(tmp_path / "others", 6, seed=2, with_ids=False)
    public = write_records(tmp_path / "public", 4, seed=3, with_ids=False)
    out = tmp_path / "out"
    args = ["attack", "--model", str(tiny_llava_path), "--data", str(members), "--non-members", str(others)]
    args += ["--heads", "layers:0", "--l2-clip-norm", "auto", "--public-data", str(public)]
    args += [
        "--shots-per-chunk",
        "2",
        "--label-noise",
        "1",
        "--bootstrap",
        "50",
        "--out",
        str(out),
        "--quiet",
    ]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    saved = json.loads((out / "membership.json").read_text())
    assert saved["settings"]["data"]["l2_clip_norm_source"] == "public quantile 0.5"
    assert saved["settings"]["data"]["label_noise"] == 1.0
    assert {t["name"] for t in saved["targets"]} == {"zero-shot", "icl", "dp-mtv"}
    assert (out / "membership.md").exists() and (out / "membership_roc.png").exists()
    assert "membership inference" in result.output


@pytest.mark.slow
def test_cli_embedded_mode_end_to_end(tiny_llava_path, tmp_path):
    pytest.importorskip("dpmtv.embedded.generator")
    out = tmp_path / "out"
    args = ["attack", "--model", str(tiny_llava_path), "--embedded-task", "name_colour"]
    args += ["--num-members", "6", "--num-non-members", "6", "--num-public", "4", "--heads", "layers:1"]
    args += [
        "--l2-clip-norm",
        "auto",
        "--shots-per-chunk",
        "2",
        "--epsilon",
        "2",
        "--non-private-mtv",
        "--shadow",
    ]
    args += ["--bootstrap", "50", "--out", str(out), "--quiet"]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    saved = json.loads((out / "membership.json").read_text())
    assert saved["settings"]["data"]["task"] == "name_colour" and saved["settings"]["epsilon"] == 2.0
    assert [t["name"] for t in saved["targets"]] == ["zero-shot", "icl", "dp-mtv", "mtv"]
    assert saved["settings"]["num_shadow"] == 6 and saved["settings"]["data"]["num_public"] == 6
    assert {m["statistic"] for m in saved["metrics"]} == {"logprob", "calibrated", "shadow"}


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ([], "give --data and --non-members, or --embedded-task"),
        (["--data", "a.jsonl", "--embedded-task", "name_colour"], "omit --data"),
        (["--data", "a.jsonl", "--non-members", "b.jsonl", "--l2-clip-norm", "auto"], "needs --public-data"),
        (["--data", "a.jsonl", "--non-members", "b.jsonl", "--shadow"], "--shadow needs --public-data"),
        (["--l2-clip-norm", "x"], "is not 'auto'"),
    ],
)
def test_cli_bad_options(tmp_path, extra, message):
    args = ["attack", "--heads", "all", "--shots-per-chunk", "2", "--out", str(tmp_path), "--quiet"]
    if "--l2-clip-norm" not in extra:
        args += ["--l2-clip-norm", "1"]
    result = CliRunner().invoke(main, [*args, *extra])
    assert result.exit_code == 2
    assert message in result.output
