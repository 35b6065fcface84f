#!/usr/bin/env python
"""Train dpmtv's embedded default model (issue 3; rule space v3: issue 24).

A ~1.2 M-parameter ``LlavaForConditionalGeneration`` (CLIP vision tower + Llama text model, see
``dpmtv.embedded.checkpoint_format``) learns the embedded task family in context: random
episodes of 16-64 shots of one task each (by default ``episodes.TRAINING_MIX``: naming, single values,
two-literal and/or, xor, three-literal rules and label maps over one attribute or a pair, with
fresh nonce words; every table the public hold-out rule ``dpmtv.embedded.rulespace.trained``
calls untrained never occurs), loss on every answer token, AdamW
with warm-up and cosine decay, plus an auxiliary attribute-probe loss on the pooled projected
image tokens (a training aid: the probes are discarded).

Example (a fixed step count makes the run independent of machine load)::

    python scripts/train_embedded.py --seed 0 --steps 8000 --out runs/embedded-seed0

Writes to ``--out``: the checkpoint (``save_pretrained`` of model and processor),
``train_log.jsonl`` (train and eval records), ``training_summary.json`` and
``learning_curves.png``. Intermediate checkpoints are written at every evaluation with
``"complete": false`` in the summary, so an interrupted run leaves a usable model behind.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shlex
import sys
import time
from pathlib import Path

# On a shared CPU, spinning OpenMP workers lose most of their time to other processes; passive
# waiting was measured ~2x faster per step under contention (set before torch loads libgomp).
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch import nn  # noqa: E402

from dpmtv.embedded import checkpoint_format as fmt  # noqa: E402
from dpmtv.embedded import episodes  # noqa: E402
from dpmtv.embedded import generator as gen  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
import task_vector_training as tvt  # noqa: E402

EVAL_SHOTS = (0, 1, 4, 16)
FINAL_EVAL_SHOTS = (0, 1, 4, 16, 64)
PROBE_CLASSES = tuple(len(gen.VALUES[a]) for a in gen.ATTRIBUTES)


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
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
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--min-lr-fraction", type=float, default=0.05)
    p.add_argument("--warmup", type=int, default=200)
    p.add_argument("--weight-decay", type=float, default=0.01)
    p.add_argument("--probe-weight", type=float, default=0.5)
    p.add_argument("--eos-weight", type=float, default=0.1)
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
    return p.parse_args(argv)


# ---------------------------------------------------------------------------------------------
# evaluation: fresh images from the full distribution (held-out combination included)
# ---------------------------------------------------------------------------------------------
def build_eval_set(seed: int, n_queries: int, shots=EVAL_SHOTS) -> dict:
    """For each shot count: ids ``(tasks*n, T)``, pixels, targets, task index per row, over the
    evaluation suite with its fixed label maps (label-balanced predicates)."""
    rng = np.random.default_rng([seed, 20_240_601])
    tasks = gen.task_suite(label_maps=True)
    sets = {}
    for k in shots:
        ids, images, targets, task_index = [], [], [], []
        for t_i, task in enumerate(tasks):
            codes = gen.sample_codes_for_task(task, n_queries * (k + 1), rng)
            codes = codes.reshape(n_queries, k + 1, 4)
            answers = task.answer_indices(codes.reshape(-1, 4)).reshape(n_queries, k + 1)
            ids.append(fmt.episode_ids(fmt.ANSWER_TOKEN_IDS[answers[:, :k]], query=True))
            images.append(gen.render(codes.reshape(-1, 4), rng))
            targets.append(fmt.ANSWER_TOKEN_IDS[answers[:, k]])
            task_index.append(np.full(n_queries, t_i))
        sets[k] = {
            "ids": torch.from_numpy(np.concatenate(ids)),
            "images": np.concatenate(images),
            "targets": torch.from_numpy(np.concatenate(targets)),
            "task_index": np.concatenate(task_index),
            "images_per_row": k + 1,
        }
    return sets


@torch.no_grad()
def evaluate(model, eval_set: dict, head_outputs=None, batch_rows: int = 256) -> dict:
    """ICL accuracy per shot count and group; with ``head_outputs``, also the MTV monitor
    (``"mtv16"``: 16-shot vectors written into zero-shot prompts)."""
    model.eval()
    tasks = gen.task_suite(label_maps=True)
    groups = {
        "naming": [t.name for t in tasks if t.kind == "naming"],
        "seen_predicates": [t.name for t in tasks if t.is_predicate and not t.held_out],
        "held_out": [t.name for t in tasks if t.is_predicate and t.held_out],
        "label_maps": [t.name for t in tasks if t.kind == "label_map"],
    }
    result: dict = {}
    for k, data in eval_set.items():
        n = len(data["ids"])
        per = data["images_per_row"]
        correct = torch.zeros(n, dtype=torch.bool)
        for start in range(0, n, batch_rows):
            stop = min(n, start + batch_rows)
            pixels = fmt.pixels_from_uint8(data["images"][start * per : stop * per])
            logits = model(input_ids=data["ids"][start:stop], pixel_values=pixels, logits_to_keep=1).logits[
                :, -1
            ]
            correct[start:stop] = logits.argmax(-1) == data["targets"][start:stop]
        per_task = {
            task.name: float(correct[torch.from_numpy(data["task_index"] == i)].float().mean())
            for i, task in enumerate(tasks)
        }
        result[str(k)] = {
            **{g: float(np.mean([per_task[n_] for n_ in names])) for g, names in groups.items()},
            "per_task": per_task,
        }
    if head_outputs is not None and 0 in eval_set and 16 in eval_set:
        index = {t.name: i for i, t in enumerate(tasks)}
        result["mtv16"] = tvt.evaluate_task_vectors(
            model, head_outputs, eval_set, {g: [index[n] for n in names] for g, names in groups.items()}
        )
    model.train()
    return result


def eval_line(ev: dict) -> str:
    return " | ".join(
        f"{k}-shot nam {v['naming']:.2f} seen {v['seen_predicates']:.2f} "
        f"held {v['held_out']:.2f} map {v['label_maps']:.2f}"
        for k, v in ev.items()
    ).replace("mtv16-shot", "MTV-16")


# ---------------------------------------------------------------------------------------------
# training
# ---------------------------------------------------------------------------------------------
class Probes(nn.Module):
    """Linear probes predicting the four attributes from mean-pooled projected image tokens."""

    def __init__(self, width: int):
        super().__init__()
        self.heads = nn.ModuleList(nn.Linear(width, c) for c in PROBE_CLASSES)

    def forward(self, pooled: torch.Tensor, codes: torch.Tensor) -> torch.Tensor:
        return sum(F.cross_entropy(h(pooled), codes[:, i]) for i, h in enumerate(self.heads)) / 4


def _grown_state(old: dict, new: dict) -> dict:
    """``old`` weights in ``new``'s shapes: a checkpoint trained before answer words were appended
    to the vocabulary (same ids for the old tokens) keeps its rows; new rows keep their fresh
    initialisation."""
    out = {}
    for name, value in new.items():
        source = old[name]
        if source.shape != value.shape:
            grown = value.clone()
            grown[: source.shape[0]] = source
            source = grown
        out[name] = source
    return out


def lr_at(step: int, progress: float, args) -> float:
    warm = min(1.0, (step + 1) / max(1, args.warmup))
    floor = args.min_lr_fraction
    cos = floor + (1 - floor) * 0.5 * (1 + math.cos(math.pi * min(1.0, progress)))
    return args.lr * warm * cos


def save_checkpoint(model, processor, out: Path, summary: dict) -> None:
    out.mkdir(parents=True, exist_ok=True)
    model.eval()
    model.save_pretrained(out)
    processor.save_pretrained(out)
    model.train()
    (out / "training_summary.json").write_text(json.dumps(summary, indent=2) + "\n")


def plot_curves(log_path: Path, png: Path) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:  # pragma: no cover
        return
    evals = [json.loads(line) for line in log_path.read_text().splitlines()]
    evals = [e for e in evals if e.get("type") == "eval"]
    if not evals:
        return
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    steps = [e["step"] for e in evals]
    for k in EVAL_SHOTS:
        axes[0].plot(steps, [e["eval"][str(k)]["seen_predicates"] for e in evals], label=f"{k}-shot")
        axes[1].plot(steps, [e["eval"][str(k)]["held_out"] for e in evals], label=f"{k}-shot")
    axes[0].set_title("seen predicates (fresh images)")
    axes[1].set_title("held-out predicates")
    for ax in axes:
        ax.set_xlabel("step")
        ax.set_ylabel("accuracy")
        ax.set_ylim(0, 1)
        ax.grid(alpha=0.3)
        ax.legend()
    fig.tight_layout()
    fig.savefig(png, dpi=100)
    plt.close(fig)


BUCKETS = ((0, 1), (1, 4), (4, 16), (16, 10_000))  # answer positions whose accuracy is logged


class _Run:
    """What one training run holds: the model, its probes and optimiser, the log file."""

    def __init__(self, args, out: Path, mix: dict):
        self.args, self.out, self.mix = args, out, mix
        self.chunk_mix = parse_mix(args.tv_chunk_mix) if args.tv_chunk_mix else mix
        self.log_path = out / "train_log.jsonl"
        self.log_path.write_text("")
        self.model = fmt.build_model(args.seed)
        if args.init is not None:
            from transformers import LlavaForConditionalGeneration

            init = LlavaForConditionalGeneration.from_pretrained(args.init)
            self.model.load_state_dict(_grown_state(init.state_dict(), self.model.state_dict()))
            del init
        self.model.train()
        self.processor = fmt.build_processor()
        self.probes = Probes(self.model.config.text_config.hidden_size)
        self.captured: dict = {}
        self.hook = self.model.model.multi_modal_projector.register_forward_hook(
            lambda _m, _i, output: self.captured.__setitem__("features", output)
        )
        self.head_outputs = tvt.HeadOutputs(self.model)
        # its own stream: with --tv-weight 0 the episodes are those of a run without the loss
        self.tv_rng = np.random.default_rng([args.seed, 24])
        self.params = list(self.model.parameters()) + list(self.probes.parameters())
        decay = [p for p in self.params if p.dim() >= 2]
        no_decay = [p for p in self.params if p.dim() < 2]
        self.optimizer = torch.optim.AdamW(
            [{"params": decay, "weight_decay": args.weight_decay}, {"params": no_decay, "weight_decay": 0.0}],
            lr=args.lr,
            betas=(0.9, 0.95),
        )

    def log(self, record: dict) -> None:
        with self.log_path.open("a") as fh:
            fh.write(json.dumps(record) + "\n")

    def step(self, batch, k: int, n_episodes: int, lr: float):
        """One optimiser step on ``batch``; returns (answer loss, probe loss, hits (E, K),
        task-vector loss and hits, or None when that loss is off)."""
        args = self.args
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        answer_ids = fmt.ANSWER_TOKEN_IDS[batch.answers]
        ids = torch.from_numpy(fmt.episode_ids(answer_ids))
        pixels = fmt.pixels_from_uint8(batch.images)
        use_tv = args.tv_weight > 0 and k - args.tv_queries > args.tv_min_context
        self.head_outputs.capturing = use_tv
        logits = self.model(input_ids=ids, pixel_values=pixels).logits
        self.head_outputs.capturing = False
        pos = torch.from_numpy(fmt.answer_positions(k))
        answer_logits = logits[:, pos]  # (E, K, V)
        answer_targets = torch.from_numpy(answer_ids)
        loss_answer = F.cross_entropy(
            answer_logits.reshape(-1, answer_logits.shape[-1]), answer_targets.reshape(-1)
        )
        eos_logits = logits[:, pos + 1]
        loss_eos = F.cross_entropy(
            eos_logits.reshape(-1, eos_logits.shape[-1]), torch.full((n_episodes * k,), fmt.EOS_ID)
        )
        pooled = self.captured.pop("features").mean(dim=1)
        loss_probe = self.probes(pooled, torch.from_numpy(batch.codes.reshape(-1, 4)))
        loss = loss_answer + args.eos_weight * loss_eos + args.probe_weight * loss_probe
        tv = None
        if use_tv:
            tv = tvt.task_vector_loss(
                self.model,
                self.head_outputs,
                batch,
                k,
                self.tv_rng,
                queries=args.tv_queries,
                min_context=args.tv_min_context,
                max_context=args.tv_max_context,
                head_fraction=args.tv_head_fraction,
            )
            loss = loss + args.tv_weight * tv[0]
        chunk_tv = None
        if args.tv_chunk_weight > 0:  # after the loss above: it reads the main pass's captures
            chunk_tv = self._chunk_mean_loss()
            loss = loss + args.tv_chunk_weight * chunk_tv[0]
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(self.params, 1.0)
        self.optimizer.step()
        with torch.no_grad():
            hits = (answer_logits.argmax(-1) == answer_targets).numpy()
        return loss_answer, loss_probe, hits, tv, chunk_tv

    def _chunk_mean_loss(self):
        """The chunk-mean loss on its own episodes (drawn from ``tv_rng``: the main episodes stay
        those of a run without it), uniform label maps as in the evaluation (not bursty)."""
        args = self.args
        low, high = (int(x) for x in args.tv_chunk_shots.split(","))
        shots = int(self.tv_rng.integers(low, high + 1))
        tasks = max(1, args.tv_chunk_tokens // (args.tv_chunks * (shots * fmt.TOKENS_PER_SHOT + 1)))
        batch = episodes.sample_episodes(
            self.tv_rng, tasks, args.tv_chunks * shots + args.tv_queries, mix=self.chunk_mix
        )
        loss, hits = tvt.chunk_mean_loss(
            self.model,
            self.head_outputs,
            batch,
            self.tv_rng,
            chunks=args.tv_chunks,
            shots=shots,
            queries=args.tv_queries,
            head_fraction=args.tv_head_fraction,
            query=args.tv_chunk_query,
        )
        return loss, hits, batch.kinds


def _command(argv) -> str:
    if argv is None:
        return " ".join(shlex.quote(a) for a in [sys.executable, *sys.argv])
    return "train_embedded.py " + " ".join(shlex.quote(a) for a in argv)


def _progress_bar(args, budget_s: float):
    if args.no_progress:
        return None
    from tqdm import tqdm

    return tqdm(
        total=args.steps or int(budget_s),
        mininterval=5.0,
        unit="step" if args.steps else "s",
        dynamic_ncols=True,
    )


def _empty_running() -> dict:
    return {"loss": [], "probe": [], "tv_loss": [], "chunk_tv_loss": [], "acc": {}}


def _record_accuracy(running: dict, hits: np.ndarray, kinds, mix, k: int) -> None:
    """Per task kind and answer-position bucket, the batch's accuracy (for the train log)."""
    kinds = np.array(kinds)
    for kind in mix:
        rows = hits[kinds == kind]
        for lo, hi in BUCKETS:
            if len(rows) and lo < k:
                key = f"{kind}:{lo}-{min(hi, k) - 1}" if hi < 10_000 else f"{kind}:{lo}+"
                running["acc"].setdefault(key, []).append(float(rows[:, lo:hi].mean()))


def _train_record(running: dict, step: int, elapsed_s: float, lr: float, steps_per_s: float) -> dict:
    by_position = {key: float(np.mean(v)) for key, v in sorted(running["acc"].items())}
    return {
        "type": "train",
        "step": step,
        "elapsed_s": round(elapsed_s, 1),
        "lr": lr,
        "loss": float(np.mean(running["loss"])),
        "probe_loss": float(np.mean(running["probe"])),
        **({"tv_loss": float(np.mean(running["tv_loss"]))} if running["tv_loss"] else {}),
        **({"chunk_tv_loss": float(np.mean(running["chunk_tv_loss"]))} if running["chunk_tv_loss"] else {}),
        "train_acc_by_position": by_position,
        "steps_per_s": steps_per_s,
    }


def _evaluate_and_save(run: _Run, eval_set, step: int, start: float, summary_base: dict, bar) -> dict:
    """Evaluate, log, print and write an (incomplete) checkpoint."""
    last_eval = evaluate(run.model, eval_set, run.head_outputs)
    elapsed = time.monotonic() - start
    run.log({"type": "eval", "step": step, "elapsed_s": round(elapsed, 1), "eval": last_eval})
    msg = f"[eval step {step} {time.monotonic() - start:.0f}s] {eval_line(last_eval)}"
    (bar.write if bar is not None else print)(msg)
    minutes = round((time.monotonic() - start) / 60, 2)
    progress = {"complete": False, "steps": step, "minutes": minutes, "last_eval": last_eval}
    save_checkpoint(run.model, run.processor, run.out, {**summary_base, **progress})
    return last_eval


def _train(run: _Run, rng: np.random.Generator, mix: dict, eval_set, summary_base: dict) -> tuple[int, float]:
    """The training loop, until the step or time budget is spent; returns (steps, start time)."""
    args = run.args
    budget_s = args.minutes * 60.0
    bar = _progress_bar(args, budget_s)
    start = last_tick = time.monotonic()
    step, running = 0, _empty_running()
    while True:
        elapsed = time.monotonic() - start
        progress = step / args.steps if args.steps else elapsed / budget_s
        if progress >= 1.0 or (args.stop_after is not None and step >= args.stop_after):
            break
        k = int(rng.integers(args.min_shots, args.max_shots + 1))
        n_episodes = max(1, args.tokens_per_step // (k * fmt.TOKENS_PER_SHOT + 1))
        batch = episodes.sample_episodes(
            rng, n_episodes, k, mix=mix, bursty_label_maps=args.bursty_label_maps
        )
        lr = lr_at(step, progress, args)
        loss_answer, loss_probe, hits, tv, chunk_tv = run.step(batch, k, n_episodes, lr)
        step += 1
        running["loss"].append(loss_answer.item())
        running["probe"].append(loss_probe.item())
        _record_accuracy(running, hits, batch.kinds, mix, k)
        if tv is not None:
            running["tv_loss"].append(tv[0].item())
            _record_accuracy(
                running, tv[1], [f"tv_{kind}" for kind in batch.kinds], {f"tv_{kind}": 1 for kind in mix}, 1
            )
        if chunk_tv is not None:
            running["chunk_tv_loss"].append(chunk_tv[0].item())
            _record_accuracy(
                running, chunk_tv[1], [f"chunk_tv_{kind}" for kind in chunk_tv[2]],
                {f"chunk_tv_{kind}": 1 for kind in run.chunk_mix}, 1,
            )  # fmt: skip
        now = time.monotonic()
        if bar is not None:
            bar.update(1 if args.steps else int(now - start) - bar.n)
            if step % 10 == 0:
                bar.set_postfix(loss=f"{np.mean(running['loss'][-10:]):.3f}", lr=f"{lr:.1e}")
        if step % args.log_every == 0:
            record = _train_record(
                running, step, now - start, lr, args.log_every / max(1e-9, now - last_tick)
            )
            last_tick = now
            run.log(record)
            running = _empty_running()
            if bar is None:
                print(json.dumps(record), flush=True)
        if step % args.eval_every == 0:
            _evaluate_and_save(run, eval_set, step, start, summary_base, bar)
    if bar is not None:
        bar.close()
    return step, start


def _finish(run: _Run, eval_set, step: int, start: float, summary_base: dict) -> dict:
    """Final evaluations on fresh queries, the complete checkpoint and the learning curves."""
    args = run.args
    train_minutes = (time.monotonic() - start) / 60
    run.hook.remove()
    del run.probes  # training aid only: never saved
    last_eval = evaluate(run.model, eval_set, run.head_outputs)
    run.log(
        {"type": "eval", "step": step, "elapsed_s": round(time.monotonic() - start, 1), "eval": last_eval}
    )
    final_set = build_eval_set(args.seed + 1_000_003, args.final_eval_queries, FINAL_EVAL_SHOTS)
    final_eval = evaluate(run.model, final_set, run.head_outputs)
    run.head_outputs.remove()
    run.log(
        {"type": "final_eval", "step": step, "queries_per_task": args.final_eval_queries, "eval": final_eval}
    )
    summary = {
        **summary_base,
        "complete": True,
        "steps": step,
        "minutes": round(train_minutes, 2),
        "final_eval": final_eval,
        "final_eval_note": (
            f"accuracy of the next token after '->' (greedy, full vocabulary) on "
            f"{args.final_eval_queries} fresh label-balanced queries per task and shot count, "
            "averaged per group of gen.task_suite(label_maps=True): naming, seen predicates, "
            "held-out predicates (never trained, nor their complements), fixed nonce label maps"
        ),
    }
    save_checkpoint(run.model, run.processor, run.out, summary)
    plot_curves(run.log_path, run.out / "learning_curves.png")
    print(f"done: {step} steps in {train_minutes:.1f} min -> {run.out}", flush=True)
    print(f"final: {eval_line(final_eval)}", flush=True)
    return summary


def parse_mix(text: str) -> dict[str, float]:
    """``naming=0.1,single=0.9`` -> ``{"naming": 0.1, "single": 0.9}``."""
    return {k: float(v) for k, v in (item.split("=") for item in text.split(","))}


def main(argv=None) -> dict:
    args = parse_args(argv)
    command = _command(argv)
    mix = parse_mix(args.mix)
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    rng = np.random.default_rng(args.seed)
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    run = _Run(args, out, mix)
    eval_set = build_eval_set(args.seed, args.eval_queries)
    n_params = sum(p.numel() for p in run.model.parameters())
    budget = f"{args.steps} steps" if args.steps else f"{args.minutes} min"
    print(f"model: {n_params:,} parameters; budget: {budget}", flush=True)
    summary_base = {
        "seed": args.seed,
        "command": command,
        "parameters": n_params,
        "args": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
        "torch": torch.__version__,
    }
    step, start = _train(run, rng, mix, eval_set, summary_base)
    return _finish(run, eval_set, step, start, summary_base)


if __name__ == "__main__":
    main()
