"""``dpmtv audit`` through click's runner: synthetic and model modes, outputs, exit status."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from dpmtv.cli import main


@pytest.fixture
def runner():
    return CliRunner()


def test_synthetic_audit_writes_json_markdown_and_plot(runner, tmp_path):
    out = tmp_path / "audit"
    args = ["audit", "--out", str(out), "--trials", "200", "--epsilons", "1,4", "--seed", "3", "--quiet"]
    result = runner.invoke(main, args)
    assert result.exit_code == 0, result.output
    report = json.loads((out / "audit.json").read_text())
    assert report["mode"] == "synthetic" and report["violation"] is False
    assert [p["epsilon_claimed"] for p in report["points"]] == [1.0, 4.0]
    assert report["settings"]["trials"] == 200 and report["confidence"] == 0.95
    # family-wise over the two claims: each bound at 1 - 0.05/2 (Bonferroni)
    assert report["multiple_testing_correction"] == "bonferroni"
    assert report["per_point_confidence"] == pytest.approx(0.975)
    assert all(p["confidence"] == pytest.approx(0.975) for p in report["points"])
    assert "| ε claim | ε lower |" in (out / "audit.md").read_text()
    assert (out / "audit.png").read_bytes()[:4] == b"\x89PNG"
    assert "privacy audit" in result.output


def test_broken_mechanism_exits_with_status_1(runner, tmp_path):
    args = ["audit", "--out", str(tmp_path), "--trials", "400", "--epsilons", "1", "--mechanism", "no-clip"]
    result = runner.invoke(main, [*args, "--seed", "4", "--quiet"])
    assert result.exit_code == 1
    assert json.loads((tmp_path / "audit.json").read_text())["violation"] is True


def test_model_mode(runner, tmp_path, tiny_llava_path, records_file):
    out = tmp_path / "audit"
    args = ["audit", "--model", str(tiny_llava_path), "--data", str(records_file), "--heads", "layers:0"]
    args += ["--l2-clip-norm", "0.5", "--shots-per-chunk", "4", "--trials", "100", "--epsilons", "2"]
    args += ["--power-repetitions", "2"]
    result = runner.invoke(main, [*args, "--out", str(out), "--seed", "0", "--quiet"])
    assert result.exit_code == 0, result.output
    report = json.loads((out / "audit.json").read_text())
    assert report["mode"] == "model" and report["settings"]["num_chunks"] == 6
    assert report["settings"]["canary"]["position"] in {"first-record", "record-1", "record-2", "last-record"}
    (power,) = report["settings"]["canary_power"]
    assert power["trials"] == 10_000 and set(power["flag_rate_by_sigma_fraction"]) >= {"1", "0.5"}


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--data", "x.jsonl"], "--data needs --model"),
        (["--model", "whatever"], "model mode needs --data"),
        (["--trials", "5"], "--trials must be >= 20"),
        (["--l2-clip-norm", "1,2"], "one --l2-clip-norm"),
    ],
)
def test_bad_options(runner, tmp_path, extra, message):
    result = runner.invoke(main, ["audit", "--out", str(tmp_path), "--quiet", *extra])
    assert result.exit_code == 2 and message in result.output


def test_sensitivity_audit_on_the_model_writes_its_table(runner, tmp_path, tiny_llava_path):
    from tests.pipeline.test_build_user_level import write_user_records

    data = write_user_records(tmp_path / "users", heavy_seed=0)
    out = tmp_path / "sens"
    args = ["audit", "--sensitivity", "--model", str(tiny_llava_path), "--data", str(data)]
    args += ["--heads", "layers:0", "--l2-clip-norm", "0.001", "--shots-per-chunk", "4"]
    args += ["--privacy-unit", "user", "--num-chunks", "16", "--max-records-per-user", "2"]
    result = runner.invoke(
        main, [*args, "--partitions", "1", "--neighbours", "2", "--out", str(out), "--quiet"]
    )
    assert result.exit_code == 0, result.output
    report = json.loads((out / "sensitivity.json").read_text())
    assert report["privacy_unit"] == "user" and report["neighbouring_relation"] == "add-remove-one"
    assert {row["change"] for row in report["summary"]} == {"add", "remove"}
    assert all(row["violations"] == 0 and row["worst_ratio"] <= 1 for row in report["summary"])
    assert "sensitivity audit" in result.output
