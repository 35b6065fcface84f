"""The evaluation of ``scripts/train_embedded.py``: fresh images from the full distribution
(held-out combinations included), ICL accuracy per shot count and task group, and the MTV monitor."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import torch

from dpmtv.embedded import checkpoint_format as fmt
from dpmtv.embedded import generator as gen

sys.path.insert(0, str(Path(__file__).resolve().parent))
import task_vector_training as tvt  # noqa: E402

EVAL_SHOTS = (0, 1, 4, 16)


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
