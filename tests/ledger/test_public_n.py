"""A replace-one dataset records its public N at its first charge and refuses a later charge of
another N (builds on 20 and 21 records are not neighbours of one dataset); add-remove-one never
records N (it is private there). On a real SQLite ledger, whose hash chain stays intact."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from dpmtv.cli import main
from dpmtv.errors import ParameterError
from dpmtv.ledger.book import Ledger
from dpmtv.ledger.build_charge import BuildCharge
from dpmtv.pipeline.settings import BuildSettings
from dpmtv.privacy import gaussian_release_event
from tests.conftest import write_records

SETTINGS = BuildSettings(epsilon=1.0, delta=1e-5, l2_clip_norm=(1.0,), shots_per_chunk=4)
EVENT = gaussian_release_event(noise_multiplier=3.0)


def _charge(ledger: Ledger, name: str, num_records: int, settings=SETTINGS):
    charge = BuildCharge(ledger, name, void_reason=None, timeout_s=1.0)
    return charge.callback(
        settings, model="tiny", library_version="0", artifact=None, num_records=num_records
    )


def test_a_replace_one_dataset_keeps_the_n_of_its_first_charge(tmp_path):
    ledger = Ledger(tmp_path / "budget.sqlite")
    ledger.init_dataset("clinic", epsilon=5.0, delta=1e-5)
    _charge(ledger, "clinic", 20)(EVENT)
    other = _charge(ledger, "clinic", 21)
    with pytest.raises(ParameterError, match=r"first charged with N = 20 records .* this build has N = 21"):
        other.preview(EVENT)  # refused before any forward pass
    with pytest.raises(ParameterError, match="N = 21"):
        other(EVENT)  # and at the charge itself, in its transaction
    _charge(ledger, "clinic", 20)(EVENT)
    status = ledger.status("clinic")
    assert [c.parameters["num_records"] for c in status.charges] == [20, 20]
    assert status.chain_problem is None


def test_add_remove_one_never_records_n(tmp_path):
    ledger = Ledger(tmp_path / "budget.sqlite")
    ledger.init_dataset("clinic", epsilon=5.0, delta=1e-5, neighbouring_relation="add-remove-one")
    settings = BuildSettings(
        epsilon=1.0, delta=1e-5, l2_clip_norm=(1.0,), shots_per_chunk=4,
        neighbouring_relation="add-remove-one", num_chunks=4,
    )  # fmt: skip
    for num_records in (20, 21):
        _charge(ledger, "clinic", num_records, settings)(EVENT)
    assert all("num_records" not in c.parameters for c in ledger.status("clinic").charges)


def test_the_cli_refuses_a_second_build_on_another_n_in_one_line(tiny_llava_path, tmp_path):
    from tests.cli.test_cli import _build_args

    runner = CliRunner()
    ledger = tmp_path / "ledger.sqlite"
    init = ["budget", "init", "clinic", "--epsilon", "5", "--delta", "1e-5", "--ledger", str(ledger)]
    assert runner.invoke(main, init).exit_code == 0
    charged = ["--dataset", "clinic", "--ledger", str(ledger)]
    for num_records, code in ((12, 0), (13, 2)):
        records = write_records(tmp_path / f"data{num_records}", num_records)
        out = tmp_path / f"v{num_records}.safetensors"
        result = runner.invoke(main, _build_args(tiny_llava_path, records, out, *charged))
        assert result.exit_code == code, result.output
    assert "N = 12" in result.output and "N = 13" in result.output and "Traceback" not in result.output
    assert not out.exists()
    shown = runner.invoke(main, ["budget", "show", "clinic", "--ledger", str(ledger), "--json"])
    assert [c["parameters"]["num_records"] for c in json.loads(shown.stdout)["charges"]] == [12]
