"""The private-only path from the command line: ``--heads-from private --l2-clip-norm private``
chooses heads and C from the private records alone, under one (ε, δ), with no public data."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from dpmtv.artifact.vector import load_task_vector
from dpmtv.cli import main
from dpmtv.errors import ArtifactIntegrityError
from dpmtv.privacy import epsilon_of, event_from_json


def _build(model, data, out, *extra):
    args = ["build", "--model", str(model), "--data", str(data), "--epsilon", "1", "--shots-per-chunk", "4"]
    return CliRunner().invoke(main, [*args, "--out", str(out), "--quiet", *extra])


def test_heads_and_clip_norm_from_the_private_data_alone(tiny_llava_path, records_file, tmp_path):
    out = tmp_path / "v.safetensors"
    result = _build(
        tiny_llava_path,
        records_file,
        out,
        "--heads-from",
        "private",
        "--select-k",
        "3",
        "--selection-fraction",
        "0.3",
        "--l2-clip-norm",
        "private",
        "--clip-epsilon-fraction",
        "0.2",
    )
    assert result.exit_code == 0, result.output
    metadata = load_task_vector(out).metadata  # the load re-derives the whole claim
    p = metadata.privacy
    assert metadata.head_selection["method"] == "private-noisy-top-k"
    assert p.clip_norm_selection["epsilon"] == 0.2 and p.clip_norm_selection["method"] == "private-quantile"
    assert len(p.l2_clip_norm) == len({layer for layer, _ in metadata.heads})
    # selection, clip round and Gaussian: one event, within the budget
    event = event_from_json(p.accounting_events)
    assert len(event.events) == 3 and epsilon_of(event, delta=p.delta) <= 1.0 + 1e-9


def test_a_private_clip_norm_refuses_public_data_and_non_private_builds(
    tiny_llava_path, records_file, tmp_path
):
    public = tmp_path / "public.jsonl"
    public.write_text("")
    with_public = _build(
        tiny_llava_path, records_file, tmp_path / "a", "--heads", "all", "--l2-clip-norm", "private",
        "--public-data", public,
    )  # fmt: skip
    assert (
        with_public.exit_code == 2
        and "--public-data is used only with --l2-clip-norm auto" in with_public.output
    )
    args = ["build", "--model", str(tiny_llava_path), "--data", str(records_file), "--heads", "all"]
    non_private = CliRunner().invoke(
        main, [*args, "--non-private", "--l2-clip-norm", "private", "--out", str(tmp_path / "b"), "--quiet"]
    )
    assert non_private.exit_code == 2 and "--non-private" in non_private.output
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()


def test_heads_chosen_among_public_candidates_and_a_private_clip_norm(
    tiny_llava_path, records_file, tmp_path
):
    """--private-selection candidates by the noise-aware chunk utility over layer-groups: one
    exponential-mechanism round among the public candidates, composed with the clip round and the
    Gaussian; the load re-derives all three and refuses an edited choice."""
    from tests.artifact.test_artifact_claims import _edited

    out = tmp_path / "v.safetensors"
    result = _build(
        tiny_llava_path, records_file, out, "--heads-from", "private", "--private-selection", "candidates",
        "--selection-utility", "noisy-probability", "--selection-fraction", "0.3",
        "--l2-clip-norm", "private", "--clip-utility", "log-loss",
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    metadata = load_task_vector(out).metadata
    selection, p = metadata.head_selection, metadata.privacy
    assert selection["method"] == "private-candidate-choice"
    details = selection["details"]
    assert len(details["candidates"]) == 21 and details["candidates"][details["chosen"]] == metadata.heads
    assert details["utility"] == "noisy-probability" and len(details["release_noise_std"]) == 21
    assert p.clip_norm_selection["utility"] == "log-loss"
    event = event_from_json(p.accounting_events)
    assert [type(e).__name__ for e in event.events] == [
        "DiscreteLaplaceDpEvent", "DiscreteLaplaceDpEvent", "GaussianDpEvent",
    ]  # fmt: skip
    assert epsilon_of(event, delta=p.delta) <= 1.0 + 1e-9

    def other_candidate(document):
        d = document["head_selection"]["details"]
        d["chosen"] = (d["chosen"] + 1) % len(d["candidates"])

    def two_rounds(document):
        document["head_selection"]["details"]["k"] = 2

    def fewer_layers(document):
        d = document["head_selection"]["details"]
        d["candidates"] = [[pair] for pair in metadata.heads[:1]] * len(d["candidates"])

    def one_candidate_less(document):
        # every number the sensitivity rests on unchanged (the full-pool set stays in the list):
        # only re-deriving the public list from its kind and pool can tell
        d = document["head_selection"]["details"]
        drop = 0 if d["chosen"] == len(d["candidates"]) - 1 else len(d["candidates"]) - 1
        del d["candidates"][drop], d["release_noise_std"][drop]
        d["chosen"] -= int(drop < d["chosen"])

    def smaller_pool(document):
        # one head fewer than the recorded pool (setting it to the chosen heads was no edit at all
        # when the noisy choice fell on the whole pool, and the forgery then loaded, rightly)
        d = document["head_selection"]["details"]
        d["pool"] = d["pool"][:-1]

    for edit in (other_candidate, two_rounds, fewer_layers, one_candidate_less, smaller_pool):
        forged = _edited(out, tmp_path / f"{edit.__name__}.safetensors", edit, rehash=True)
        with pytest.raises(
            ArtifactIntegrityError, match=r"privacy\.(accounting_events|sensitivity_l2_clip_norm)"
        ):
            load_task_vector(forged)


def test_heads_chosen_on_the_release_from_the_command_line(tiny_llava_path, records_file, tmp_path):
    """--selection-utility released-probability: the whole pool released, the candidates scored on
    every record with it; the load re-derives the claim and refuses an edited choice."""
    from tests.artifact.test_artifact_claims import _edited

    out = tmp_path / "v.safetensors"
    result = _build(
        tiny_llava_path,
        records_file,
        out,
        "--heads-from",
        "private",
        "--private-selection",
        "candidates",
        "--l2-clip-norm",
        "private",
    )  # fmt: skip  (the defaults of --private-selection candidates: on the release, 0.1 ε)
    assert result.exit_code == 0, result.output
    metadata = load_task_vector(out).metadata
    details = metadata.head_selection["details"]
    assert details["utility"] == "released-probability" and "release_noise_std" not in details
    assert details["epsilon_selection"] == pytest.approx(0.1)
    assert details["candidates"][details["chosen"]] == metadata.heads
    assert epsilon_of(event_from_json(metadata.privacy.accounting_events), delta=1e-5) <= 1.0 + 1e-9

    def other_candidate(document):
        d = document["head_selection"]["details"]
        d["chosen"] = (d["chosen"] + 1) % len(d["candidates"])

    def smaller_pool(document):
        d = document["head_selection"]["details"]
        d["pool"] = d["pool"][:-1]

    for edit in (other_candidate, smaller_pool):
        forged = _edited(out, tmp_path / f"{edit.__name__}.safetensors", edit, rehash=True)
        with pytest.raises(ArtifactIntegrityError, match=r"privacy\.accounting_events"):
            load_task_vector(forged)
