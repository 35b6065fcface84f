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
from train_embedded_args import add_options  # noqa: E402
from train_embedded_eval import EVAL_SHOTS, build_eval_set, eval_line, evaluate  # noqa: E402

FINAL_EVAL_SHOTS = (0, 1, 4, 16, 64)
PROBE_CLASSES = tuple(len(gen.VALUES[a]) for a in gen.ATTRIBUTES)


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    add_options(p)
    return p.parse_args(argv)


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
