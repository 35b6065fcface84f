"""The sensitivity audit covers the private rounds before the release (issue 28): the private clip
norm's scores and private selection's totals move by at most their declared Δ∞ between
neighbours, and planted bugs (a term that depends on another chunk, a Δ∞ half too small) fail it."""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pytest
from click.testing import CliRunner

import dpmtv.forward._prepare as prepare_module
import dpmtv.privacy.clip_quantile as clip_quantile
import dpmtv.privacy.noisy_top_k as noisy_top_k
from dpmtv.audit.sensitivity import audit_sensitivity
from dpmtv.cli import main
from dpmtv.data import load_records
from dpmtv.heads import parse_head_spec
from dpmtv.pipeline.build import BuildSettings
from dpmtv.pipeline.settings import PrivateClipSettings, PrivateSelectionSettings

CLIP = "private clip norm"


def _settings(method: str | None, *, clip_utility: str = "log-loss", **changes) -> BuildSettings:
    selection = None
    if method is not None:
        selection = PrivateSelectionSettings(k=2, method=method, selection_fraction=0.3)
    return BuildSettings(
        epsilon=1.0,
        delta=1e-5,
        l2_clip_norm=(1.0,),  # provisional, as the build's: C is chosen privately
        shots_per_chunk=4,
        center="blank",
        progress=False,
        private_selection=selection,
        private_clip=PrivateClipSettings(epsilon_fraction=0.2, utility=clip_utility),
        **changes,
    )


def _check_within(audit, rounds: set[str]) -> None:
    assert {row["round"] for row in audit.round_rows()} == rounds
    assert audit.violations == () and audit.worst.ratio <= 1
    assert all(0 <= p.ratio <= 1 for p in audit.round_pairs)
    rebuilt = [p for p in audit.round_pairs if p.rebuild_gap is not None]
    assert rebuilt and max(p.rebuild_gap for p in rebuilt) < 1e-9
    for chosen in audit.chosen_on_d:  # the release is measured at the C chosen on D
        assert len(chosen["l2_clip_norm"]) == len({layer for layer, _ in chosen["heads"]})


def test_a_private_only_audit_with_candidates_stays_within_every_bound(tiny_llava, records_file):
    audit = audit_sensitivity(
        tiny_llava, load_records(records_file), None, _settings("candidates"), num_partitions=2,
        neighbours_per_partition=3,
    )  # fmt: skip
    _check_within(audit, {CLIP, "private selection (candidates)"})
    report = audit.to_json()
    assert report["rounds"] == audit.round_rows() and len(report["chosen_on_d"]) == 2
    assert "chose on D" in report["release_at"] and "private clip norm" in audit.to_markdown()
    (selection,) = [r for r in audit.round_rows() if r["round"].startswith("private selection")]
    assert selection["linf_sensitivity"] == pytest.approx(1.0)  # one chunk moves each total by <= 1


def test_a_choice_on_the_release_is_audited_at_the_pool_and_every_records_utility(tiny_llava, records_file):
    """--selection-utility released-probability: the release is the whole pool's (measured there),
    and one record moves every candidate's total over the records by at most 1."""
    selection = PrivateSelectionSettings(
        k=1,
        method="candidates",
        candidates="layer-groups",
        utility="released-probability",
        selection_fraction=0.1,
    )
    settings = replace(_settings(None), private_selection=selection)
    audit = audit_sensitivity(
        tiny_llava, load_records(records_file), None, settings, num_partitions=2, neighbours_per_partition=3
    )
    _check_within(audit, {CLIP, "private selection (candidates)"})
    geometry = tiny_llava.adapter.geometry
    for chosen in audit.chosen_on_d:  # released: every pool head; chosen among the candidates
        assert len(chosen["heads"]) == geometry.num_layers * geometry.num_heads
        assert set(map(tuple, chosen["chosen_on_release"])) <= set(map(tuple, chosen["heads"]))
    (row,) = [r for r in audit.round_rows() if r["round"].startswith("private selection")]
    assert row["linf_sensitivity"] == pytest.approx(1.0) and row["worst_ratio"] > 0


@pytest.mark.parametrize("planted", [False, True])
def test_votes_with_a_delta_half_too_small_are_flagged(tiny_llava, records_file, monkeypatch, planted):
    """The noisy top-k calibrated for Δ∞ = 1/2: the audit reads the Δ∞ the noise is drawn for."""
    if planted:
        real = noisy_top_k.noisy_top_k_scale
        halved = lambda **kwargs: real(**kwargs) / 2  # noqa: E731
        monkeypatch.setattr(noisy_top_k, "noisy_top_k_scale", halved)  # the noise drawn
        monkeypatch.setattr("dpmtv.audit._build_path.noisy_top_k_scale", halved)  # the Δ∞ it is for
    records = load_records(records_file)
    audit = audit_sensitivity(
        tiny_llava, records, None, _settings("votes"), num_partitions=1, neighbours_per_partition=2
    )
    (votes,) = [r for r in audit.round_rows() if r["round"] == "private selection (votes)"]
    if planted:
        assert votes["violations"] > 0 and votes["worst_ratio"] == pytest.approx(2.0)
    else:
        _check_within(audit, {CLIP, "private selection (votes)"})
        assert votes["worst_ratio"] == pytest.approx(1.0)  # a vote moved: the bound is tight


@pytest.mark.parametrize("planted", [False, True])
def test_a_clip_score_that_depends_on_other_chunks_is_flagged(tiny_llava, records_file, monkeypatch, planted):
    """Each chunk's ratio divided by the largest over the chunks (a scale-free quantile): still in
    range chunk by chunk, but one chunk's change moves every chunk's term."""
    if planted:
        real = clip_quantile.multiplier_ratios

        def normalised(chunk_norms, *, layer_scales):
            ratios = real(chunk_norms, layer_scales=layer_scales)
            return ratios / ratios.max()

        monkeypatch.setattr(clip_quantile, "multiplier_ratios", normalised)
        monkeypatch.setattr("dpmtv.audit._build_path.multiplier_ratios", normalised)
    records = load_records(records_file)
    settings = _settings("candidates", clip_utility="quantile")
    audit = audit_sensitivity(
        tiny_llava, records, None, settings, num_partitions=2, neighbours_per_partition=3
    )
    (clip,) = [r for r in audit.round_rows() if r["round"] == CLIP]
    if planted:
        assert clip["violations"] > 0 and clip["worst_ratio"] > 1
    else:
        _check_within(audit, {CLIP, "private selection (candidates)"})


def test_a_private_clip_with_given_heads_under_add_remove(tiny_llava, records_file):
    heads = parse_head_spec("layers:0-1", tiny_llava.adapter.geometry)
    settings = _settings(None, neighbouring_relation="add-remove-one", num_chunks=6)
    audit = audit_sensitivity(
        tiny_llava, load_records(records_file), heads, settings, num_partitions=1, neighbours_per_partition=2
    )
    _check_within(audit, {CLIP})
    assert {row["change"] for row in audit.round_rows()} == {"add", "remove"}


@pytest.mark.parametrize("composition", ["sequential", "parallel"])
def test_private_selection_with_a_given_clip_norm(tiny_llava, records_file, composition):
    """No clip round: the release is at the given C, Δ the worst case over the pool's layers."""
    utility = "released-probability" if composition == "sequential" else "noisy-probability"
    selection = PrivateSelectionSettings(k=2, method="candidates", composition=composition, utility=utility)
    settings = BuildSettings(
        epsilon=1.0, delta=1e-5, l2_clip_norm=(1e-3,), shots_per_chunk=4, center="blank", progress=False,
        private_selection=selection,
    )  # fmt: skip
    audit = audit_sensitivity(
        tiny_llava, load_records(records_file), None, settings, num_partitions=1, neighbours_per_partition=2
    )
    assert {row["round"] for row in audit.round_rows()} == {"private selection (candidates)"}
    assert audit.violations == () and 0 < audit.worst.ratio <= 1
    assert audit.chosen_on_d[0]["l2_clip_norm"] is None  # the given C


def test_heads_must_be_given_exactly_without_private_selection(tiny_llava, records_file):
    from dpmtv.errors import ParameterError

    heads = parse_head_spec("layers:0", tiny_llava.adapter.geometry)
    records = load_records(records_file)
    with pytest.raises(ParameterError, match="released heads, or private selection"):
        audit_sensitivity(tiny_llava, records, heads, _settings("candidates"))
    with pytest.raises(ParameterError, match="released heads, or private selection"):
        audit_sensitivity(tiny_llava, records, None, _settings(None))


class _CountingPool(prepare_module.WorkerPool):
    started: list[int] = []

    def __init__(self, workers, inherited=None):
        _CountingPool.started.append(workers)
        super().__init__(workers, inherited)


@pytest.mark.parametrize("reusing", [True, False])
def test_the_audit_passes_reuse_their_prepare_workers(tiny_llava, records_file, monkeypatch, reusing):
    """Issue 25.1: every pass of the audit (D, each D', the rebuilds) prepares its chunks in the
    same two forked workers; without the block each pass would fork its own."""
    import dpmtv.audit.sensitivity as sensitivity_module

    monkeypatch.setattr(_CountingPool, "started", [])
    monkeypatch.setattr(prepare_module, "WorkerPool", _CountingPool)
    audit = sensitivity_module.audit_sensitivity
    if not reusing:  # the same audit without its reusing block: the comparison this test rests on
        audit = audit.__wrapped__
    heads = parse_head_spec("layers:0", tiny_llava.adapter.geometry)
    settings = BuildSettings(
        epsilon=1.0, delta=1e-5, l2_clip_norm=(1e-3,), shots_per_chunk=4, progress=False, prepare_workers=2
    )
    result = audit(
        tiny_llava, load_records(records_file), heads, settings, num_partitions=2, neighbours_per_partition=2
    )
    assert result.violations == ()
    if reusing:
        assert _CountingPool.started == [2]
    else:
        assert len(_CountingPool.started) >= 4


def test_the_cli_audits_a_private_only_build(tiny_llava_path, records_file, tmp_path):
    out = tmp_path / "sens"
    args = ["audit", "--sensitivity", "--model", str(tiny_llava_path), "--data", str(records_file)]
    args += ["--heads-from", "private", "--private-selection", "candidates", "--l2-clip-norm", "private"]
    args += ["--shots-per-chunk", "4", "--center", "blank", "--partitions", "1", "--neighbours", "2"]
    result = CliRunner().invoke(main, [*args, "--out", str(out), "--quiet"])
    assert result.exit_code == 0, result.output
    report = json.loads((out / "sensitivity.json").read_text())
    assert {row["round"] for row in report["rounds"]} == {CLIP, "private selection (candidates)"}
    assert all(row["violations"] == 0 and row["worst_ratio"] <= 1 for row in report["rounds"])
    assert report["chosen_on_d"][0]["l2_clip_norm"] and "private rounds" in result.output
    assert np.isfinite(report["summary"][0]["worst_ratio"])


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--heads", "all", "--l2-clip-norm", "auto"], "give C as a number or 'private'"),
        (["--heads", "all", "--heads-from", "private", "--l2-clip-norm", "1"], "exactly one of --heads"),
    ],
)
def test_the_cli_refuses_what_it_cannot_audit(tiny_llava_path, records_file, tmp_path, extra, message):
    args = ["audit", "--sensitivity", "--model", str(tiny_llava_path), "--data", str(records_file)]
    result = CliRunner().invoke(main, [*args, *extra, "--shots-per-chunk", "4", "--out", str(tmp_path)])
    assert result.exit_code == 2 and message in result.output


def test_private_round_options_need_sensitivity(tmp_path):
    result = CliRunner().invoke(main, ["audit", "--l2-clip-norm", "private", "--out", str(tmp_path)])
    assert result.exit_code == 2 and "add --sensitivity" in result.output
