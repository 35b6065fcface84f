"""The demo's summary numbers on hand-made summaries (no model)."""

from __future__ import annotations

import math

from dpmtv.demo import gain_kept


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
