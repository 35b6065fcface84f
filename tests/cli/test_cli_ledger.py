"""The budget ledger through the command line: what a build charges, when, and what it refuses.

Each test checks the property itself: the ledger's contents (``budget show --json``), whether an
artifact was written, and whether the model ran a forward pass at all (counted on the real
transformers class, so a refusal "before any extraction" is checked, not its message).
"""

from __future__ import annotations

import json
import shutil

import pytest
from click.testing import CliRunner
from transformers import LlavaForConditionalGeneration

from dpmtv.cli import main
from dpmtv.privacy import epsilon_of, event_from_json
from tests.conftest import write_records

DELTA = 1e-5


@pytest.fixture
def runner():
    return CliRunner()


@pytest.fixture
def forward_calls(monkeypatch):
    """Counts forward passes of the tiny LLaVA model (every extraction is one)."""
    calls = []
    original = LlavaForConditionalGeneration.forward

    def counting(self, *args, **kwargs):
        calls.append(1)
        return original(self, *args, **kwargs)

    monkeypatch.setattr(LlavaForConditionalGeneration, "forward", counting)
    return calls


def _build(model, data, out, *extra, epsilon="1"):
    return [
        "build",
        "--model",
        str(model),
        "--data",
        str(data),
        "--epsilon",
        epsilon,
        "--delta",
        str(DELTA),
        "--l2-clip-norm",
        "1.5",
        "--shots-per-chunk",
        "4",
        "--out",
        str(out),
        "--quiet",
        *extra,
    ]


def _init(runner, ledger, name, epsilon, *extra):
    args = ["budget", "init", name, "--epsilon", str(epsilon), "--delta", str(DELTA), "--ledger", str(ledger)]
    result = runner.invoke(main, [*args, *extra])
    assert result.exit_code == 0, result.output


def _show(runner, ledger, name):
    result = runner.invoke(main, ["budget", "show", name, "--ledger", str(ledger), "--json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_relation_and_unit_are_fixed_at_init(runner, tiny_llava_path, records_file, tmp_path, forward_calls):
    ledger = tmp_path / "ledger.sqlite"
    _init(runner, ledger, "clinic", 5, "--neighbouring-relation", "add-remove-one")
    assert _show(runner, ledger, "clinic")["neighbouring_relation"] == "add-remove-one"
    out = tmp_path / "v.safetensors"
    charge = ["--heads", "layers:0", "--dataset", "clinic", "--ledger", str(ledger)]
    result = runner.invoke(main, _build(tiny_llava_path, records_file, out, *charge))
    assert result.exit_code == 2 and "replace-one" in result.output and "add-remove-one" in result.output
    assert not out.exists() and forward_calls == [] and _show(runner, ledger, "clinic")["charges"] == []
    # the same relation is accepted
    result = runner.invoke(
        main,
        _build(
            tiny_llava_path,
            records_file,
            out,
            *charge,
            "--neighbouring-relation",
            "add-remove-one",
            "--num-chunks",
            "4",
        ),
    )
    assert result.exit_code == 0, result.output
    assert len(_show(runner, ledger, "clinic")["charges"]) == 1


def test_unknown_dataset_and_overrun_are_refused_before_any_forward_pass(
    runner, tiny_llava_path, records_file, tmp_path, forward_calls
):
    ledger = tmp_path / "ledger.sqlite"
    _init(runner, ledger, "clinic", 0.5)
    out = tmp_path / "v.safetensors"
    args = _build(tiny_llava_path, records_file, out, "--heads", "layers:0", "--ledger", str(ledger))
    result = runner.invoke(main, [*args, "--dataset", "colours"])
    assert result.exit_code == 2 and "colours" in result.output
    assert forward_calls == [] and not out.exists()
    result = runner.invoke(main, [*args, "--dataset", "clinic"])  # ε = 1 does not fit in 0.5
    assert result.exit_code == 1 and "budget exceeded" in result.output
    assert forward_calls == [] and not out.exists() and _show(runner, ledger, "clinic")["charges"] == []


def test_summary_shows_the_charge_and_show_lists_absolute_path_and_hash(
    runner, tiny_llava_path, records_file, tmp_path, monkeypatch
):
    ledger = tmp_path / "ledger.sqlite"
    _init(runner, ledger, "colours", 2)
    monkeypatch.chdir(tmp_path)
    result = runner.invoke(
        main,
        _build(
            tiny_llava_path,
            records_file,
            "rel.safetensors",
            "--heads",
            "layers:0",
            "--dataset",
            "colours",
            "--ledger",
            str(ledger),
        ),
    )
    assert result.exit_code == 0, result.output
    (charge,) = _show(runner, ledger, "colours")["charges"]
    artifact = json.loads(
        runner.invoke(main, ["inspect", str(tmp_path / "rel.safetensors"), "--json"]).stdout
    )
    assert charge["artifact"] == str((tmp_path / "rel.safetensors").resolve())
    assert charge["tensors_sha256"] == artifact["tensors_sha256"]
    assert f"colours: {charge['epsilon_after']:.2f} of 2.00 spent" in result.output
    table = runner.invoke(main, ["budget", "show", "colours", "--ledger", str(ledger)], terminal_width=400)
    assert str((tmp_path / "rel.safetensors").resolve()) in table.output
    assert artifact["tensors_sha256"][:16] in table.output


def test_parallel_composition_is_charged_the_larger_event(runner, tiny_llava_path, tmp_path):
    data = write_records(tmp_path / "d", 32)
    ledger = tmp_path / "ledger.sqlite"
    _init(runner, ledger, "clinic", 10)
    out = tmp_path / "v.safetensors"
    private = ["--heads-from", "private", "--select-k", "2", "--selection-composition", "parallel"]
    result = runner.invoke(
        main, _build(tiny_llava_path, data, out, *private, "--dataset", "clinic", "--ledger", str(ledger))
    )
    assert result.exit_code == 0, result.output
    shown = _show(runner, ledger, "clinic")
    (charge,) = shown["charges"]
    assert shown["epsilon_spent"] <= 1.0 + 1e-9  # each half is (1, δ)-DP: never their composition
    alternatives = [event_from_json(e) for e in charge["event"]["parallel_alternatives"]]
    assert len(alternatives) == 2
    separate = [epsilon_of(event, delta=DELTA) for event in alternatives]
    assert shown["epsilon_spent"] == pytest.approx(max(separate), rel=1e-9)


def test_non_private_and_seeded_builds_void_the_dataset_only_when_asked(
    runner, tiny_llava_path, records_file, tmp_path, forward_calls
):
    ledger = tmp_path / "ledger.sqlite"
    _init(runner, ledger, "clinic", 5)
    out = tmp_path / "v.safetensors"
    charge = ["--heads", "layers:0", "--dataset", "clinic", "--ledger", str(ledger), "--force"]
    seeded = _build(tiny_llava_path, records_file, out, *charge, "--insecure-seeded-noise", "3")
    result = runner.invoke(main, seeded)
    assert result.exit_code == 2 and "--void-budget" in result.output
    assert not out.exists() and forward_calls == []
    assert _show(runner, ledger, "clinic")["void"] is False
    result = runner.invoke(main, [*seeded, "--void-budget"])
    assert result.exit_code == 0, result.output
    shown = _show(runner, ledger, "clinic")
    assert shown["void"] is True and shown["charges"] == [] and len(shown["voids"]) == 1
    assert shown["voids"][0]["artifact"] == str(out.resolve())
    table = runner.invoke(main, ["budget", "show", "clinic", "--ledger", str(ledger)], terminal_width=400)
    assert "VOID" in table.output
    non_private = [
        a
        for a in _build(tiny_llava_path, records_file, out, *charge, "--non-private")
        if a not in ("--epsilon", "1")
    ]
    assert runner.invoke(main, non_private).exit_code == 2
    result = runner.invoke(main, [*non_private, "--void-budget"])
    assert result.exit_code == 0, result.output
    assert len(_show(runner, ledger, "clinic")["voids"]) == 2
    # a later private build still charges, and the dataset stays VOID for good
    result = runner.invoke(main, _build(tiny_llava_path, records_file, out, *charge))
    assert result.exit_code == 0, result.output
    shown = _show(runner, ledger, "clinic")
    assert shown["void"] is True and len(shown["charges"]) == 1


@pytest.mark.parametrize("kind", ["center", "heads-from", "query"])
def test_public_data_that_is_private_is_refused_before_any_forward_pass(
    runner, tiny_llava_path, records_file, tmp_path, forward_calls, kind
):
    public_dir = tmp_path / "public"
    public = write_records(public_dir, 8, seed=7)
    rows = [json.loads(line) for line in public.read_text().splitlines()]
    private_rows = [json.loads(line) for line in records_file.read_text().splitlines()]
    for index in (0, 3, 5):  # three private records copied into the "public" file
        shutil.copy(records_file.parent / private_rows[index]["image"], public_dir / f"img/copy{index}.png")
        rows.append({**private_rows[index], "image": f"img/copy{index}.png", "id": f"p{index}"})
    public.write_text("".join(json.dumps(row) + "\n" for row in rows))
    out = tmp_path / "v.safetensors"
    option = {
        "center": ["--heads", "layers:0", "--center", str(public)],
        "heads-from": ["--heads-from", f"public:{public}", "--select-method", "scored"],
        "query": ["--heads", "layers:0", "--query", str(public_dir / "img" / "copy3.png")],
    }[kind]
    result = runner.invoke(main, _build(tiny_llava_path, records_file, out, *option))
    assert result.exit_code == 1, result.output
    expected = "1 private record" if kind == "query" else "3 of the 11 public records"
    assert expected in result.output and forward_calls == [] and not out.exists()


@pytest.mark.parametrize("sampler", ["opendp", "csprng-numpy"])
def test_summary_states_one_epsilon_and_explains_the_accounting(
    runner, tiny_llava_path, records_file, tmp_path, sampler
):
    out = tmp_path / "v.safetensors"
    args = _build(tiny_llava_path, records_file, out, "--heads", "layers:0", "--noise-sampler", sampler)
    result = runner.invoke(main, args, terminal_width=400)
    assert result.exit_code == 0, result.output
    privacy = json.loads(runner.invoke(main, ["inspect", str(out), "--json"]).stdout)["privacy"]
    text = " ".join(result.output.split())  # table cells wrap
    assert "PLDAccountant" not in text and "ADD_OR_REMOVE_ONE" not in text
    assert "ε spent" not in text  # one ε: the guarantee
    assert "Δ already covers replacing one record" in text
    # both samplers now draw the calibrated σ (OpenDP's discrete Gaussian is accounted directly,
    # docs/design.md §8), so the σ drawn is worth the whole ε and no lower ε is reported
    assert privacy["epsilon_spent"] > 0.999 and "certifies" not in text


def test_budget_show_prints_whole_timestamps_and_every_epsilon_alike(runner, tmp_path):
    """No timestamp cut to '…' on an 80-column terminal; spent, remaining and each charge's ε
    with the same number of decimals."""
    import re

    import dp_accounting

    from dpmtv.ledger.book import Ledger

    ledger = Ledger(tmp_path / "ledger.sqlite")
    ledger.init_dataset("clinic", epsilon=2.0, delta=DELTA)
    receipt = ledger.charge(
        "clinic",
        dp_accounting.GaussianDpEvent(3.0),
        neighbouring_relation="replace-one",
        privacy_unit="record",
        parameters={},
        artifact=tmp_path / "a-rather-long-artifact-name.safetensors",
    )
    ledger.mark_written(receipt)
    shown = runner.invoke(main, ["budget", "show", "clinic", "--ledger", str(ledger.path)], terminal_width=80)
    assert shown.exit_code == 0, shown.output
    assert "…" not in shown.output
    status = ledger.status("clinic")
    for stamp in (status.created_at, status.charges[0].charged_at, status.charges[0].written_at):
        assert stamp[:10] + " " + stamp[11:19] + " UTC" in shown.output
    spent, remaining = (
        re.search(rf"{row}\D*ε = (\S+)", shown.output).group(1) for row in ("spent", "remaining")
    )
    assert len(spent.split(".")[1]) == len(remaining.split(".")[1])
    assert float(spent) + float(remaining) == pytest.approx(2.0, rel=1e-3)
    overview = runner.invoke(main, ["budget", "show", "--ledger", str(ledger.path)], terminal_width=80)
    assert (
        f"{status.epsilon_spent:.4f}" in overview.output
        and f"{status.epsilon_headroom:.4f}" in overview.output
    )
