"""The demo's summary numbers on hand-made summaries (no model), and the table's spread over seeds."""

from __future__ import annotations

import math

from dpmtv.demo import RERUN_NOTE, gain_kept
from dpmtv.demo.report import _group_cells


def _summary(zero: float, icl: float, mtv: float, dp: float) -> list[dict]:
    return [
        {"method": "zero-shot", "epsilon": None, "accuracy": zero},
        {"method": "icl-16 (non-private)", "epsilon": None, "accuracy": icl},
        {"method": "mtv (non-private)", "epsilon": None, "accuracy": mtv},
        {"method": "dp-mtv", "epsilon": 1.0, "accuracy": dp},
    ]


def test_gain_kept_by_hand():
    kept = gain_kept(_summary(zero=0.5, icl=0.9, mtv=0.8, dp=0.7))
    assert math.isclose(kept["of_icl_gain"], 0.2 / 0.4) and math.isclose(kept["of_mtv_gain"], 0.2 / 0.3)
    assert math.isclose(kept["mtv_over_icl"], 0.8 / 0.9)


def test_gain_kept_is_nan_when_there_is_no_gain_to_keep():
    """A group where ICL and MTV gain nothing over zero-shot (a tie, common on the quick demo's
    few queries) has no fraction to report; the demo must not crash on it."""
    kept = gain_kept(_summary(zero=0.5, icl=0.5, mtv=0.5, dp=0.6))
    assert math.isnan(kept["of_icl_gain"]) and math.isnan(kept["of_mtv_gain"])
    assert kept["mtv_over_icl"] == 1.0
    assert math.isnan(gain_kept(_summary(zero=0.0, icl=0.0, mtv=0.0, dp=0.0))["mtv_over_icl"])


def test_cells_carry_the_spread_over_seeds_and_the_note_says_why():
    row = {"method": "dp-mtv", "epsilon": 1.0, "accuracy": 0.5, "ci95": 0.1, "per_seed": [0.45, 0.5, 0.55]}
    single = {"method": "dp-mtv", "epsilon": 1.0, "accuracy": 0.5, "ci95": None, "per_seed": [0.5]}
    (cell,) = _group_cells({"seen": [row]}, row)
    assert cell == "0.500 ± 0.100 [0.450–0.550]"
    (cell,) = _group_cells({"seen": [single]}, single)
    assert cell == "0.500"  # one seed: no spread to show
    assert "fresh partition" in RERUN_NOTE and "fresh noise" in RERUN_NOTE
