"""DPMTV_EMBEDDED_CHECKPOINT puts another folder of the embedded format in the packaged model's
place: ``--model embedded`` loads it and the embedded benchmark reads its public heads."""

from __future__ import annotations

import json

from dpmtv.embedded import CHECKPOINT_DIR, CHECKPOINT_ENV
from dpmtv.embedded import checkpoint_format as fmt
from dpmtv.eval.benchmarks.embedded import public_selection
from dpmtv.models.loading import load_model


def test_the_variable_names_the_checkpoint_that_embedded_loads(tmp_path, monkeypatch):
    folder = tmp_path / "retrained"
    model = fmt.build_model(3, text_width=64, text_layers=5)
    model.save_pretrained(folder)
    fmt.build_processor().save_pretrained(folder)
    defaults = json.loads((CHECKPOINT_DIR / "dpmtv_defaults.json").read_text())
    defaults["per_task"]["is_green"] = {"heads": [[4, 7]], "l2_clip_norm": [0.25]}
    (folder / "dpmtv_defaults.json").write_text(json.dumps(defaults))

    monkeypatch.setenv(CHECKPOINT_ENV, str(folder))
    loaded = load_model("embedded")
    assert (loaded.adapter.geometry.num_layers, loaded.adapter.geometry.head_dim) == (5, 8)
    assert public_selection("is_green") == ([[4, 7]], (0.25,))

    monkeypatch.delenv(CHECKPOINT_ENV)
    assert load_model("embedded").adapter.geometry.num_layers == 4
    assert public_selection("is_green") != ([[4, 7]], (0.25,))
