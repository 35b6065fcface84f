"""``dpmtv select`` through click's runner, on the planted tiny model saved to disk."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from dpmtv.cli import main
from dpmtv.heads import HeadSet
from dpmtv.selection import SelectionResult
from tests.selection.planted import PLANTED


def _select(checkpoint, public_path, out, *extra):
    args = ["select", "--model", str(checkpoint), "--public-data", str(public_path), "--out", str(out)]
    return CliRunner().invoke(main, [*args, "--shots", "4", "--quiet", *extra])


def test_greedy_selection_is_written_and_readable_by_heads(planted_checkpoint, public_path, tmp_path):
    result = _select(planted_checkpoint, public_path, tmp_path / "heads.json", "--method", "greedy")
    assert result.exit_code == 0, result.output
    saved = SelectionResult.load(tmp_path / "heads.json")
    assert saved.heads == HeadSet.of(PLANTED) and saved.method == "greedy+best-of"
    assert "heads" in json.loads((tmp_path / "heads.json").read_text())
    words = " ".join(result.output.split())
    assert "greedy's heads kept" in words and "won:" not in words


@pytest.mark.parametrize(
    ("extra", "method"),
    [
        (["--method", "reinforce", "--steps", "3", "--no-compare"], "reinforce"),
        (["--method", "scored", "--k", "3", "--estimate", "attribution"], "scored-attribution+best-of"),
    ],
)
def test_other_methods_run(planted_checkpoint, public_path, tmp_path, extra, method):
    result = _select(planted_checkpoint, public_path, tmp_path / "h.json", *extra)
    assert result.exit_code == 0, result.output
    assert SelectionResult.load(tmp_path / "h.json").method == method


def test_errors_are_one_line_with_exit_code_2(planted_checkpoint, public_path, tmp_path):
    result = _select(planted_checkpoint, public_path, tmp_path / "h.json", "--pool", "heads:9.0")
    assert result.exit_code == 2 and "layer 9 does not exist" in result.output
    result = _select(planted_checkpoint, public_path, tmp_path / "h.json", "--method", "scored", "--k", "99")
    assert result.exit_code == 2 and "--k 99 is more than the 8 candidate heads" in " ".join(
        result.output.split()
    )
    result = _select(planted_checkpoint, public_path, tmp_path / "h.json", "--method", "greedy", "--k", "9")
    assert result.exit_code == 2 and "choose --k <= 8" in " ".join(result.output.split())


def test_the_report_says_when_compare_replaced_the_methods_heads():
    from dpmtv.cli.select import _comparison_text

    result = SelectionResult(
        heads=HeadSet.of([(0, 0), (0, 1)]),
        method="greedy+best-of",
        candidates={"greedy": -2.5, "layers:0-0": -1.0, "all": -3.0},
        chosen="layers:0-0",
    )
    text = _comparison_text(result, "greedy")
    assert "saved heads are 'layers:0-0', NOT greedy's" in text and "--no-compare" in text
    kept = SelectionResult(
        heads=result.heads, method="greedy+best-of", candidates=result.candidates, chosen="greedy"
    )
    assert _comparison_text(kept, "greedy").startswith("greedy's heads kept")
