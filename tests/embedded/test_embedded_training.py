"""A few-step run of scripts/train_embedded.py: loss falls and the output folder reloads."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import torch
from transformers import AutoModelForImageTextToText, AutoProcessor, LlavaProcessor

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "train_embedded.py"


def _load_script():
    spec = importlib.util.spec_from_file_location("train_embedded", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_few_step_training_smoke(tmp_path):
    script = _load_script()
    threads = torch.get_num_threads()
    try:
        summary = script.main(
            [
                "--seed",
                "0",
                "--steps",
                "10",
                "--out",
                str(tmp_path / "ckpt"),
                "--tokens-per-step",
                "800",
                "--min-shots",
                "8",
                "--max-shots",
                "16",
                "--warmup",
                "2",
                "--log-every",
                "2",
                "--eval-every",
                "10",
                "--eval-queries",
                "2",
                "--final-eval-queries",
                "2",
                "--threads",
                "1",
                "--no-progress",
            ]
        )
    finally:
        torch.set_num_threads(threads)
    out = tmp_path / "ckpt"
    records = [json.loads(line) for line in (out / "train_log.jsonl").read_text().splitlines()]
    losses = [r["loss"] for r in records if r["type"] == "train"]
    assert len(losses) == 5 and losses[-1] < losses[0]
    assert summary["complete"] and summary["steps"] == 10 and summary["seed"] == 0
    written = json.loads((out / "training_summary.json").read_text())
    assert set(written["final_eval"]) == {"0", "1", "4", "16", "64", "mtv16"}
    assert set(written["final_eval"]["16"]) >= {"naming", "seen_predicates", "held_out", "label_maps"}
    assert isinstance(AutoProcessor.from_pretrained(out), LlavaProcessor)
    model = AutoModelForImageTextToText.from_pretrained(out)
    assert not any("probe" in name for name, _ in model.named_parameters())


def test_the_chunk_mean_loss_draws_its_episodes_from_its_own_mix(tmp_path):
    """``--tv-chunk-mix label_map=1`` with a blank chunk query: every chunk-mean episode is a label
    map while the main episodes keep ``--mix``."""
    script = _load_script()
    threads = torch.get_num_threads()
    args = ["--seed", "0", "--steps", "4", "--out", str(tmp_path / "ckpt"), "--tokens-per-step", "600"]
    args += ["--min-shots", "8", "--max-shots", "12", "--warmup", "1", "--log-every", "2"]
    args += ["--eval-every", "100", "--eval-queries", "1", "--final-eval-queries", "1", "--threads", "1"]
    args += ["--no-progress", "--mix", "single=0.5,composition=0.5", "--tv-chunk-weight", "1"]
    args += ["--tv-chunks", "2", "--tv-chunk-shots", "3,4", "--tv-chunk-tokens", "400"]
    args += ["--tv-chunk-query", "blank", "--tv-chunk-mix", "label_map=1.0"]
    try:
        script.main(args)
    finally:
        torch.set_num_threads(threads)
    records = [json.loads(line) for line in (tmp_path / "ckpt" / "train_log.jsonl").read_text().splitlines()]
    kinds = {key.split(":")[0] for r in records if r["type"] == "train" for key in r["train_acc_by_position"]}
    assert {k for k in kinds if k.startswith("chunk_tv_")} == {"chunk_tv_label_map"}
    assert {k for k in kinds if not k.startswith(("chunk_tv_", "tv_"))} <= {"single", "composition"}
