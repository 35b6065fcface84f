"""Does the MTV vector carry what the demonstrations taught? A linear probe on the mean of the
heads' last-token outputs over a task's chunks (issue 24, item 3; DEV set only).

MTV and DP-MTV answer from the mean over chunks of the heads' last-token outputs. With N = 2048
records every one of the 64 attribute combinations is shown about 32 times, so the records
determine the whole table; the question is whether the mean vector still holds it. If a linear
probe reads a task's answers back from its mean vector, the table is there and what MTV loses is
in the injection (the model's use of the vector); if not, no head selection can bring it back.

- Features: every head's last-token ``o_proj`` input (all layers and heads), averaged over the
  task's chunks of ``s`` = 8 records read with ``--query record`` (the shipped build's read).
- Predicates: one logistic probe per attribute combination (64), fitted on the vectors of
  ``--tables`` training tables of one of two kinds: ``random`` (every cell an independent coin:
  nothing but the cell's own evidence predicts it) and ``trained`` (distinct trained tables:
  structure can stand in for evidence, as it does for a model). L2 strength by 4-fold
  cross-validation over the training tables (reported on 1/4, 1/2 and all of them: a probe
  limited by its training set climbs with it). The same probes on the records' own evidence (per
  combination, the share of its records answered yes) show what a vector holding the evidence
  linearly would give. Scored on the dev predicates of
  ``embedded_selection_dev.py`` (untrained tables outside the suite), dev seeds 200-201, their
  private records (N = 2048, 256 chunks) and test queries: the probe's answer to a test query is
  its prediction for the query's cell; all queries and deciding cells (the ceiling pooled over
  both seeds, as the dev runs pool it), beside v4's MTV on the same queries
  (``results/embedded_selection_dev.json``).
- Label maps: one multinomial probe per mapped attribute and value (which of the 24 nonce words
  names it), fitted on fresh maps of that attribute; scored by 4-fold cross-validation over
  fresh maps (the dev maps are two more fresh maps: 8 decisions, too few alone) and on the dev
  maps' test queries. A vector that holds only the map's words (a bag, no assignment) scores
  1/4 of the values; the **assignment accuracy** (the probe's choice among the map's own words
  only, chance 1/4) says whether it holds which word goes with which value.
- Training tasks use the PUBLIC split at seeds from ``PROBE_SEED`` (disjoint from the dev seeds);
  nothing here touches the evaluation suite's held-out tasks or the demo's seeds.

Usage: .venv/bin/python benchmarks/embedded_vector_probe.py \
           --out benchmarks/results/embedded_vector_probe_dev.json
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
import torch
from embedded_selection_dev import DEV_SEEDS, dev_tasks

from dpmtv._atomic import write_text_atomically
from dpmtv._progress import progress_bar
from dpmtv.data.prompts import chunk_prompt
from dpmtv.demo.recognition import run_ceiling
from dpmtv.embedded.generator import (
    ANSWER_INDEX,
    ATTR_POS,
    LABEL_MAP_ATTRIBUTES,
    NONCE_WORDS,
    VALUES,
    Task,
    label_map_task,
    yes_no_table,
)
from dpmtv.embedded.rulespace import canonical, trained, trained_tables
from dpmtv.embedded.suite import task_codes, task_records
from dpmtv.embedded.world import ALL_CODES, combo_index
from dpmtv.forward.extract import mean_selected_heads
from dpmtv.heads import parse_head_spec
from dpmtv.models.loading import load_model

PROBE_SEED = 20_261_206  # public, fixed before any probe number was seen
SHOTS_PER_CHUNK = 8
DEV_RECORDS = 2048
TEST_QUERIES = 128  # per dev task and seed, as embedded_selection_dev.py
L2_GRID = (1e-3, 1e-2, 1e-1, 1.0, 10.0)
FOLDS = 4


def mean_vector(adapter, heads, records, batch_size: int) -> np.ndarray:
    """The mean over the records' chunks of ``s`` of every head's last-token output, flattened."""
    chunks = [records[i : i + SHOTS_PER_CHUNK] for i in range(0, len(records), SHOTS_PER_CHUNK)]
    prompts = [chunk_prompt(c, query="record", query_question="") for c in chunks]
    means = mean_selected_heads(adapter, prompts, heads, batch_size=batch_size)
    return np.concatenate([means[layer] for layer in sorted(means)]).astype(np.float64)


def predicate_task(truth: np.ndarray, name: str) -> Task:
    return Task(name=name, kind="rule", held_out=True, table=yes_no_table(truth))


def training_tables(
    kind: str, count: int, excluded: set[bytes], rng: np.random.Generator
) -> list[np.ndarray]:
    """``count`` training tables: independent coins per cell, or distinct trained tables."""
    if kind == "random":
        tables = []
        while len(tables) < count:
            truth = rng.uniform(size=64) < 0.5
            if truth.any() and not truth.all() and canonical(truth) not in excluded and not trained(truth):
                tables.append(truth)
        return tables
    pool = [t for t in trained_tables() if canonical(t) not in excluded]
    picks = rng.choice(len(pool), size=count, replace=False)
    return [pool[int(i)] if rng.uniform() < 0.5 else ~pool[int(i)] for i in picks]


def fit_logistic(x: np.ndarray, y: np.ndarray, classes: int, l2: float) -> tuple[np.ndarray, np.ndarray]:
    """Multinomial logistic regression on standardised ``x`` (``y``: class per row, ``(n, outputs)``
    for ``outputs`` independent probes), L2 ``l2`` per weight; LBFGS to convergence."""
    xt = torch.as_tensor(x, dtype=torch.float64)
    yt = torch.as_tensor(y, dtype=torch.int64)
    outputs = y.shape[1]
    weight = torch.zeros(outputs, x.shape[1], classes, dtype=torch.float64, requires_grad=True)
    bias = torch.zeros(outputs, classes, dtype=torch.float64, requires_grad=True)
    optimiser = torch.optim.LBFGS([weight, bias], max_iter=500, line_search_fn="strong_wolfe")

    def closure():
        optimiser.zero_grad()
        logits = torch.einsum("nf,ofc->noc", xt, weight) + bias
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, classes), yt.reshape(-1))
        loss = loss + l2 * weight.pow(2).sum() / len(xt)
        loss.backward()
        return loss

    optimiser.step(closure)
    return weight.detach().numpy(), bias.detach().numpy()


def logits(x: np.ndarray, weight: np.ndarray, bias: np.ndarray) -> np.ndarray:
    return np.einsum("nf,ofc->noc", x, weight) + bias  # (n, outputs, classes)


def standardise(train: np.ndarray, *others: np.ndarray) -> list[np.ndarray]:
    mean, std = train.mean(axis=0), train.std(axis=0) + 1e-8
    return [(a - mean) / std for a in (train, *others)]


def cross_validated(x: np.ndarray, y: np.ndarray, classes: int, allowed: np.ndarray | None = None) -> dict:
    """4-fold cross-validated accuracy (folds by task) at each L2 strength of the grid; the best
    strength and its accuracy. With ``allowed`` (``(n, classes)`` bool: a label map's own words)
    also the accuracy of the argmax among the allowed classes only, with its own best strength."""
    folds = np.arange(len(x)) % FOLDS
    scores: dict[str, dict[float, float]] = {"free": {}, "allowed": {}}
    for l2 in L2_GRID:
        free, restricted = [], []
        for fold in range(FOLDS):
            train, test = folds != fold, folds == fold
            xs, xv = standardise(x[train], x[test])
            out = logits(xv, *fit_logistic(xs, y[train], classes, l2))
            free.append(out.argmax(axis=2) == y[test])
            if allowed is not None:
                masked = np.where(allowed[test][:, None, :], out, -np.inf)
                restricted.append(masked.argmax(axis=2) == y[test])
        scores["free"][l2] = float(np.concatenate(free).mean())
        if allowed is not None:
            scores["allowed"][l2] = float(np.concatenate(restricted).mean())
    out: dict = {}
    for name, by_l2 in scores.items():
        if by_l2:
            best = max(by_l2, key=by_l2.__getitem__)
            out[name] = {"l2": best, "accuracy": by_l2[best]}
    return out


def evidence(task: Task, n: int, *, seed: int, split: str) -> np.ndarray:
    """What the records themselves show, as a vector: per attribute combination the share of its
    records answered ``yes`` (0.5 where none falls): a linear probe reads any table from it."""
    rows = combo_index(task_codes(task, n, seed=seed, split=split))
    yes = task.truth[rows].astype(float)
    counts = np.bincount(rows, minlength=len(ALL_CODES))
    sums = np.bincount(rows, weights=yes, minlength=len(ALL_CODES))
    return np.where(counts > 0, sums / np.maximum(counts, 1), 0.5)


def probe_predicates(
    x: np.ndarray, tables: list[np.ndarray], dev: list[np.ndarray], dev_tasks_: list[Task]
) -> dict:
    """The cell probes on ``x`` (one row per training table): cross-validated cell accuracy on
    the first 1/4, 1/2 and all training tables, then the probe fitted on all of them scored on
    the dev predicates' test queries (``dev``: one feature row per dev task and seed, in order)."""
    y = np.stack(tables).astype(np.int64)
    curve = {}
    for size in (len(x) // 4, len(x) // 2, len(x)):
        curve[str(size)] = cross_validated(x[:size], y[:size], 2)["free"]
    l2 = curve[str(len(x))]["l2"]
    xs, *dev_scaled = standardise(x, *dev)
    weight, bias = fit_logistic(xs, y, 2, l2)
    hits_all, hits_deciding, per_task = [], [], {}
    for t_index, task in enumerate(dev_tasks_):
        task_hits, task_deciding = [], []
        for s_index, (rows, answers, deciding) in enumerate(dev_queries(task)):
            row = dev_scaled[t_index * len(DEV_SEEDS) + s_index][None]
            table = logits(row, weight, bias).argmax(axis=2)[0]
            correct = table[rows].astype(bool) == (answers == ANSWER_INDEX["yes"])
            task_hits.append(correct)
            task_deciding.append(correct[deciding])
        count = int(sum(map(len, task_deciding)))
        per_task[task.name] = {
            "accuracy": float(np.concatenate(task_hits).mean()),
            "deciding_accuracy": float(np.concatenate(task_deciding).mean()) if count else None,
            "deciding_count": count,
        }
        hits_all += task_hits
        hits_deciding += task_deciding
    return {
        "training_tables": len(tables),
        "cross_validated_cell_accuracy": curve,
        "dev_accuracy": float(np.concatenate(hits_all).mean()),
        "dev_deciding_accuracy": float(np.concatenate(hits_deciding).mean()),
        "dev_deciding_count": int(sum(map(len, hits_deciding))),
        "per_task": per_task,
    }


def dev_queries(task: Task) -> list[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """Per dev seed: the task's test queries' cells, their true answer indices and whether each is
    in a deciding cell (the ceiling pooled over the dev seeds; predicates only)."""
    ceiling = run_ceiling(task, DEV_SEEDS, TEST_QUERIES) if task.is_predicate else None
    out = []
    for seed in DEV_SEEDS:
        rows = combo_index(task_codes(task, TEST_QUERIES, seed=seed, split="test"))
        deciding = np.isin(rows, ceiling.deciding_rows) if ceiling else np.ones(len(rows), dtype=bool)
        out.append((rows, task.table[rows], deciding))
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--checkpoint", default="embedded")
    parser.add_argument("--tables", type=int, default=256, help="training tables per kind")
    parser.add_argument("--maps", type=int, default=128, help="training label maps per attribute")
    parser.add_argument("--records", type=int, default=256, help="records per training task (chunks of 8)")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    started = time.time()
    loaded = load_model(args.checkpoint)
    adapter = loaded.adapter
    heads = parse_head_spec("all", adapter.geometry)
    rng = np.random.default_rng(PROBE_SEED)
    tasks = dev_tasks()
    dev_predicates = [t for t in tasks if t.is_predicate]
    excluded = {canonical(t.truth) for t in dev_predicates}

    def vectors(train_tasks: list[Task], label: str) -> np.ndarray:
        out = []
        with progress_bar(label, len(train_tasks), enabled=True) as advance:
            for i, task in enumerate(train_tasks):
                records = task_records(task, args.records, seed=PROBE_SEED + i, split="public")
                out.append(mean_vector(adapter, heads, records, args.batch_size))
                advance(1)
        return np.stack(out)

    def dev_vectors(dev: list[Task]) -> dict[tuple[str, int], np.ndarray]:
        out = {}
        with progress_bar("dev tasks", len(dev) * len(DEV_SEEDS), enabled=True) as advance:
            for task in dev:
                for seed in DEV_SEEDS:
                    records = task_records(task, DEV_RECORDS, seed=seed, split="private")
                    out[task.name, seed] = mean_vector(adapter, heads, records, args.batch_size)
                    advance(1)
        return out

    results: dict = {
        "command": " ".join([Path(sys.executable).name, *sys.argv]),
        "checkpoint": args.checkpoint,
        "features": int(len(heads) * adapter.geometry.head_dim),
        "predicates": {},
        "label_maps": {},
    }
    dev_x = dev_vectors(tasks)
    dev_rows = [dev_x[t.name, s] for t in dev_predicates for s in DEV_SEEDS]
    dev_evidence = [
        evidence(t, DEV_RECORDS, seed=s, split="private") for t in dev_predicates for s in DEV_SEEDS
    ]
    for kind in ("random", "trained"):
        tables = training_tables(kind, args.tables, excluded, rng)
        train_tasks = [predicate_task(t, f"probe_{kind}_{i}") for i, t in enumerate(tables)]
        x = vectors(train_tasks, f"{kind} tables")
        shown = np.stack(
            [
                evidence(t, args.records, seed=PROBE_SEED + i, split="public")
                for i, t in enumerate(train_tasks)
            ]
        )
        results["predicates"][kind] = {
            "mean_vector": probe_predicates(x, tables, dev_rows, dev_predicates),
            "records_evidence": probe_predicates(shown, tables, dev_evidence, dev_predicates),
        }
        print(kind, json.dumps(results["predicates"][kind], indent=1), flush=True)
    word_index = np.array([ANSWER_INDEX[w] for w in NONCE_WORDS])
    for attribute in LABEL_MAP_ATTRIBUTES:
        values = len(VALUES[attribute])
        maps = [rng.choice(len(NONCE_WORDS), values, replace=False) for _ in range(args.maps)]
        map_tasks = [
            label_map_task(attribute, [NONCE_WORDS[i] for i in words], name=f"probe_map_{attribute}_{m}")
            for m, words in enumerate(maps)
        ]
        x = vectors(map_tasks, f"{attribute} maps")
        y = np.stack(maps).astype(np.int64)  # (maps, values): the word index naming each value
        allowed = np.zeros((len(maps), len(NONCE_WORDS)), dtype=bool)
        np.put_along_axis(allowed, y, True, axis=1)
        scores = cross_validated(x, y, len(NONCE_WORDS), allowed)
        dev = next(t for t in tasks if t.name == f"dev_map_{attribute}")
        xs, *dev_scaled = standardise(x, *(dev_x[dev.name, s] for s in DEV_SEEDS))
        weight, bias = fit_logistic(xs, y, len(NONCE_WORDS), scores["free"]["l2"])
        hits = []
        for scaled, (rows, answers, _) in zip(dev_scaled, dev_queries(dev), strict=True):
            words = word_index[logits(scaled[None], weight, bias).argmax(axis=2)[0]]  # per value
            hits.append(words[ALL_CODES[rows, ATTR_POS[attribute]]] == answers)
        results["label_maps"][attribute] = {
            "training_maps": len(maps),
            "cross_validated_word_accuracy": scores["free"],
            "chance": 1 / len(NONCE_WORDS),
            "cross_validated_assignment_accuracy": scores["allowed"],
            "assignment_chance": 1 / values,
            "dev_map_accuracy": float(np.concatenate(hits).mean()),
            "dev_map_queries": int(sum(map(len, hits))),
        }
        print(attribute, json.dumps(results["label_maps"][attribute], indent=1), flush=True)
    results["seconds"] = round(time.time() - started, 1)
    write_text_atomically(args.out, json.dumps(results, indent=1) + "\n")


if __name__ == "__main__":
    main()
