"""The public-input check (dpmtv.pipeline.public_inputs) runs once per build: the CLI checks its
options' public files before any forward pass, and the build checks only what is not covered."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from dpmtv.cli import main
from dpmtv.data import load_records, overlap
from dpmtv.errors import RecordError
from dpmtv.heads import parse_head_spec
from dpmtv.pipeline.build import BuildSettings, build_task_vector
from dpmtv.pipeline.public_inputs import PublicFiles, check_public_inputs, ensure_checked
from tests.conftest import write_records


@pytest.fixture
def fingerprinted(monkeypatch):
    """Where each record fingerprinted by the overlap check came from (``file:line``), as often as it was."""
    seen = []
    original = overlap.record_fingerprint

    def counting(record):
        seen.append(record.where)
        return original(record)

    monkeypatch.setattr(overlap, "record_fingerprint", counting)
    return seen


def _mixed(tmp_path, private_file, count):
    """A "public" file of 4 public records and the first ``count`` private ones."""
    public_file = write_records(tmp_path / "public", 4, seed=9)
    rows = [json.loads(line) for line in public_file.read_text().splitlines()]
    private = [json.loads(line) for line in private_file.read_text().splitlines()][:count]
    moved = [
        {**row, "id": f"p{i}", "image": str(private_file.parent / row["image"])}
        for i, row in enumerate(private)
    ]
    public_file.write_text("".join(json.dumps(row) + "\n" for row in [*rows, *moved]))
    return public_file


def test_a_cli_build_fingerprints_each_private_record_once(
    tiny_llava_path, records_file, tmp_path, fingerprinted
):
    public = _mixed(tmp_path, records_file, 0)
    out = tmp_path / "v.safetensors"
    args = ["build", "--model", str(tiny_llava_path), "--data", str(records_file), "--epsilon", "1"]
    args += ["--delta", "1e-5", "--l2-clip-norm", "1.5", "--shots-per-chunk", "4", "--heads", "layers:0"]
    args += ["--center", str(public), "--out", str(out), "--quiet"]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    private = [r.where for r in load_records(records_file)]
    assert sorted(w for w in fingerprinted if w in private) == sorted(private)  # once each


def test_the_build_checks_the_files_its_caller_did_not(tiny_llava, records_file, tmp_path):
    records = load_records(records_file)
    public = _mixed(tmp_path, records_file, 2)
    clean = write_records(tmp_path / "clean", 4, seed=11)
    checked = check_public_inputs(records, PublicFiles(records={"--heads-from": clean}))
    settings = BuildSettings(
        epsilon=1.0, delta=1e-5, l2_clip_norm=(1.0,), shots_per_chunk=4, center=str(public)
    )
    with pytest.raises(RecordError, match=r"--center '.*': 2 of the 6 public records are also private"):
        ensure_checked(checked, settings)
    heads = parse_head_spec("layers:0", tiny_llava.adapter.geometry)
    with pytest.raises(RecordError, match="2 of the 6 public records"):  # a library build checks too
        build_task_vector(tiny_llava, records, heads, settings)


def test_a_file_already_checked_is_not_checked_again(records_file, tmp_path, fingerprinted):
    records = load_records(records_file)
    public = _mixed(tmp_path, records_file, 0)
    settings = BuildSettings(
        epsilon=1.0, delta=1e-5, l2_clip_norm=(1.0,), shots_per_chunk=4, center=str(public)
    )
    checked = check_public_inputs(records, PublicFiles.of_settings(settings))
    count = len(fingerprinted)
    assert ensure_checked(checked, settings) is records and len(fingerprinted) == count
