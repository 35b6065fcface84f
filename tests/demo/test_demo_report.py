"""The demo's summary numbers on hand-made summaries (no model), and the table's spread over seeds."""

from __future__ import annotations

import math
import re

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


def test_a_gain_within_noise_has_no_share_reported():
    """The held-out deciding cells: ICL 0.610 against zero-shot 0.595 (a gain of 0.015) made
    DP-MTV's 0.656 read as "keeps 422 % of the ICL gain"."""
    kept = gain_kept(_summary(zero=0.595, icl=0.610, mtv=0.601, dp=0.656))
    assert math.isnan(kept["of_icl_gain"]) and math.isnan(kept["of_mtv_gain"])
    assert math.isclose(kept["mtv_over_icl"], 0.601 / 0.610)


def test_cells_carry_the_spread_over_seeds_and_the_note_says_why():
    row = {"method": "dp-mtv", "epsilon": 1.0, "accuracy": 0.5, "ci95": 0.1, "per_seed": [0.45, 0.5, 0.55]}
    single = {"method": "dp-mtv", "epsilon": 1.0, "accuracy": 0.5, "ci95": None, "per_seed": [0.5]}
    (cell,) = _group_cells({"seen": [row]}, row)
    assert cell == "0.500 ± 0.100 [0.450–0.550]"
    (cell,) = _group_cells({"seen": [single]}, single)
    assert cell == "0.500"  # one seed: no spread to show
    # why other seeds move and a rerun does not: eval's seeds fix the partition and the noise
    assert "the partition (MTV, DP-MTV) and the noise (DP-MTV)" in RERUN_NOTE
    assert "not private releases" in RERUN_NOTE


def test_shots_plot_draws_every_group(tmp_path):
    """Label maps and typed rules are groups of their own; the shots plot has a colour for each
    (the first --rule run raised KeyError 'rules' there, after an hour of scoring)."""
    from dpmtv.demo.report import _plot_shots

    def rows(acc):
        return [
            {"method": f"icl-{k} (non-private)", "epsilon": None, "accuracy": acc, "ci95": None}
            for k in (1, 4)
        ]

    from dpmtv.demo.config import default_config

    shots = {g: rows(0.5) for g in ("seen", "held_out", "label_maps", "rules")}
    _plot_shots(shots, {}, default_config(), tmp_path / "shots.png")
    assert (tmp_path / "shots.png").read_bytes()[:4] == b"\x89PNG"


def test_a_summary_over_rows_of_only_some_seeds_uses_those_seeds(recwarn):
    """The shot curve runs on the first seed only: its summary has that seed alone (no NaN in the
    JSON, no numpy warning printed)."""
    from dpmtv.demo.config import default_config
    from dpmtv.demo.report import summarise_over_tasks

    config = default_config(quick=False)
    rows = [
        {"method": "icl-4 (non-private)", "epsilon": None, "seed": config.seeds[0], "accuracy": a, "task": t}
        for t, a in (("is_red", 0.5), ("is_big", 0.75))
    ]
    (entry,) = summarise_over_tasks(rows, config)
    assert entry["per_seed"] == [0.625]
    assert entry["accuracy"] == 0.625
    assert not [w for w in recwarn if issubclass(w.category, RuntimeWarning)]


def test_summary_json_has_no_nan():
    import json

    from dpmtv.demo.report import _without_nan

    meta = {"kept": gain_kept(_summary(zero=0.5, icl=0.5, mtv=0.5, dp=0.6)), "rows": [float("nan"), 1.0]}
    text = json.dumps(_without_nan(meta))
    json.loads(text, parse_constant=lambda name: (_ for _ in ()).throw(ValueError(name)))
    assert json.loads(text)["rows"] == [None, 1.0]


def test_the_reports_command_names_a_checkpoint_override(monkeypatch):
    """A demo on another checkpoint says so in the command its reports give to reproduce it."""
    from dpmtv.demo import command_line
    from dpmtv.demo.config import default_config
    from dpmtv.embedded import CHECKPOINT_ENV

    monkeypatch.delenv(CHECKPOINT_ENV, raising=False)
    assert command_line(default_config(quick=True)) == "dpmtv demo --quick"
    monkeypatch.setenv(CHECKPOINT_ENV, "/models/my retrained")
    assert (
        command_line(default_config(quick=True))
        == f"{CHECKPOINT_ENV}='/models/my retrained' dpmtv demo --quick"
    )
    assert command_line(default_config(quick=False)).startswith(
        f"{CHECKPOINT_ENV}='/models/my retrained' dpmtv demo"
    )


def _held_out(zero: float, icl: float, mtv: float, dp: float) -> list[dict]:
    rows = _summary(zero=0.47, icl=0.79, mtv=0.80, dp=0.79)
    for row, deciding in zip(rows, (zero, icl, mtv, dp)):
        row["deciding_accuracy"] = deciding
    return rows


def test_a_method_below_zero_shot_is_said_to_fall_below_it_not_to_keep_a_negative_share():
    from dpmtv.demo.story import gain_words

    words = gain_words(_held_out(0.587, 0.668, 0.518, 0.514), key="deciding_accuracy")
    assert words == "DP-MTV at ε = 1 fell below zero-shot (0.514 against 0.587)"
    assert "keeps 50% of ICL's gain" in gain_words(_summary(zero=0.5, icl=0.9, mtv=0.8, dp=0.7))
    assert "no share of ICL's gain" in gain_words(_summary(zero=0.5, icl=0.52, mtv=0.8, dp=0.7))


def test_the_closing_sentences_are_at_most_six_and_carry_the_caveat(tmp_path):
    from dpmtv.demo.config import default_config
    from dpmtv.demo.story import EMBEDDED_MODEL_DOCS, closing_sentences

    summary = {
        "seen": _summary(zero=0.37, icl=0.93, mtv=0.93, dp=0.93),
        "held_out": _held_out(0.587, 0.668, 0.518, 0.514),
        "label_maps": _summary(zero=0.0, icl=0.51, mtv=0.29, dp=0.28),
    }
    sentences = closing_sentences(summary, default_config(), tmp_path / "a.safetensors")
    assert len(sentences) <= 6 and sentences[0].startswith("Shown: zero-shot, 16-shot ICL, MTV and DP-MTV")
    (caveat,) = [s for s in sentences if "only the demonstrations can settle" in s]
    assert "MTV and DP-MTV fell below zero-shot (0.59)" in caveat
    assert EMBEDDED_MODEL_DOCS in sentences[-1] and str(tmp_path / "a.safetensors") in sentences[-1]
    assert not any(re.search(r"-\d+\s?%|—", s) for s in sentences)


def test_every_table_of_the_report_parses(tmp_path):
    """report.md rebuilt from the shipped --full demo's summary (docs/demo-full): every table parses."""
    import json
    from pathlib import Path

    from dpmtv.demo.config import DemoConfig
    from dpmtv.demo.report import write_outputs
    from tests._markdown import BARE_DASH, assert_tables_valid

    shipped = Path(__file__).parents[2] / "docs" / "demo-full"
    meta = json.loads((shipped / "summary.json").read_text())
    rows = json.loads((shipped / "results.json").read_text())
    config = DemoConfig(**{k: tuple(v) if isinstance(v, list) else v for k, v in meta["config"].items()})
    artifact = tmp_path / "task_eps1.safetensors"
    shots, releases, per_task = meta["icl_by_shots"], meta["releases"], meta["per_task"]
    references = meta["demonstration_references"]
    summary = meta["summary"]
    write_outputs(tmp_path, rows, summary, shots, config, releases, artifact, 1.0, per_task, references)
    report = (tmp_path / "report.md").read_text()
    assert assert_tables_valid(report) == 4  # all queries, deciding cells, per task, shots
    assert not BARE_DASH.search(report)
    for name in ("privacy_utility.png", "deciding_cells.png", "accuracy_vs_shots.png"):
        assert (tmp_path / name).read_bytes()[:4] == b"\x89PNG"
