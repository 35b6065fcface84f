"""The options of ``scripts/train_embedded.py``, in four groups (the order ``--help`` lists them)."""

from __future__ import annotations

import argparse
from pathlib import Path

from dpmtv.embedded import episodes


def add_options(p: argparse.ArgumentParser) -> None:
    """Every option of the training script, group by group."""
    for group in (_episode_options, _optimiser_options, _task_vector_options, _run_options):
        group(p)


def _episode_options(p: argparse.ArgumentParser) -> None:
    """The run's length and its episodes: seed, budget, output, tokens and shots per step, the mix."""
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--minutes", type=float, default=40.0, help="wall-clock budget of the loop")
    p.add_argument(
        "--steps",
        type=int,
        default=None,
        help="fixed number of steps instead of a time budget (schedule by steps)",
    )
    p.add_argument(
        "--stop-after",
        type=int,
        default=None,
        help="stop after this many steps of the --steps schedule (the weights are those the full\n"
        "run has at that step; used for the first stage of a staged run)",
    )
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--tokens-per-step", type=int, default=3000)
    p.add_argument("--min-shots", type=int, default=16)
    p.add_argument("--max-shots", type=int, default=64)
    p.add_argument(
        "--mix",
        default=",".join(f"{k}={v:g}" for k, v in episodes.TRAINING_MIX.items()),
        help="episode groups and their probabilities (naming, single, composition, label_map)",
    )
    p.add_argument(
        "--bursty-label-maps",
        type=float,
        default=0.0,
        help="share of label-map episodes drawn from a few attribute combinations (episodes.sample_episodes)",
    )


def _optimiser_options(p: argparse.ArgumentParser) -> None:
    """AdamW's schedule and the loss weights."""
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--min-lr-fraction", type=float, default=0.05)
    p.add_argument("--warmup", type=int, default=200)
    p.add_argument("--weight-decay", type=float, default=0.01)
    p.add_argument("--probe-weight", type=float, default=0.5)
    p.add_argument("--eos-weight", type=float, default=0.1)


def _task_vector_options(p: argparse.ArgumentParser) -> None:
    """The auxiliary task-vector losses (scripts/task_vector_training.py); weight 0 turns each off."""
    p.add_argument(
        "--tv-weight",
        type=float,
        default=0.0,
        help="weight of the task-vector loss (scripts/task_vector_training.py); 0 turns it off",
    )
    p.add_argument("--tv-queries", type=int, default=4, help="zero-shot queries per episode for that loss")
    p.add_argument("--tv-min-context", type=int, default=4, help="shots before the first averaged position")
    p.add_argument("--tv-max-context", type=int, default=None, help="shots before the last averaged position")
    p.add_argument("--tv-head-fraction", type=float, default=0.5, help="chance each head is overwritten")
    p.add_argument(
        "--tv-chunk-weight",
        type=float,
        default=0.0,
        help="weight of the chunk-mean task-vector loss (task_vector_training.chunk_mean_loss: the\n"
        "vector is the mean over disjoint chunk prompts of one task, as DP-MTV reads it); 0 = off",
    )
    p.add_argument("--tv-chunks", type=int, default=8, help="chunk prompts averaged per task vector")
    p.add_argument(
        "--tv-chunk-shots", default="4,12", help="records per chunk prompt, drawn per step from MIN,MAX"
    )
    p.add_argument(
        "--tv-chunk-query",
        choices=("record", "blank"),
        default="record",
        help="each chunk prompt's query: its last record's image, or a grey image after all its records",
    )
    p.add_argument(
        "--tv-chunk-mix",
        default=None,
        help="episode groups of the chunk-mean loss, as --mix (default: --mix)",
    )
    p.add_argument(
        "--tv-chunk-tokens", type=int, default=3000, help="token budget of the chunk prompts per step"
    )


def _run_options(p: argparse.ArgumentParser) -> None:
    """Evaluation, threads, the starting checkpoint and the log."""
    p.add_argument("--eval-every", type=int, default=500, help="steps between evaluations")
    p.add_argument("--eval-queries", type=int, default=32, help="queries per task and shot count")
    p.add_argument("--final-eval-queries", type=int, default=100)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument(
        "--init",
        type=Path,
        default=None,
        help="continue from the weights of a checkpoint folder written by this script\n"
        "(fresh optimizer and schedule; probes start anew)",
    )
    p.add_argument("--log-every", type=int, default=50)
    p.add_argument("--no-progress", action="store_true")
