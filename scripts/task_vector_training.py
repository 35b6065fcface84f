"""Training aid for scripts/train_embedded.py: a loss that makes mean last-token head outputs
carry the episode's rule (issue 24, item 3).

MTV reads each head's ``o_proj`` input at the last token of many-shot prompts, averages it over
prompts and writes the mean into selected heads of a zero-shot query. A model trained only on
in-context answers has no reason to put the inferred rule where that mean can carry it: MTV fell
back to the nearest trained rule where ICL had learned. This loss trains the mechanism itself:

- per episode, ``v`` = mean over its ``->`` positions with at least ``min_context`` (and, with
  ``max_context``, at most that many: a DP-MTV chunk of s records reads the position after s - 1
  shots) shots before them (and before the episode's last ``queries`` shots) of every head's
  ``o_proj`` input;
- the episode's last ``queries`` images are asked zero-shot (``<bos><image>->``) with a random
  subset of heads (each with probability ``head_fraction``, per episode and layer) overwritten
  by ``v`` at the last position, the others left to read the query image;
- cross-entropy on the answer. Gradients reach ``v`` through the episode's own forward pass.

Random head subsets keep any selection the package's public head search makes usable, and a
causal mask keeps the query shots out of ``v`` (they come after every averaged position).
"""

from __future__ import annotations

from contextlib import contextmanager

import numpy as np
import torch
import torch.nn.functional as F

from dpmtv.data.prompts import blank_image
from dpmtv.embedded import checkpoint_format as fmt
from dpmtv.embedded.render import IMAGE_SIZE


class HeadOutputs:
    """Forward pre-hooks on every decoder layer's ``o_proj``: ``capture`` keeps the inputs of
    the next forward call; ``inject`` overwrites masked heads at the last position."""

    def __init__(self, model) -> None:
        text = model.config.text_config
        self.num_heads = text.num_attention_heads
        self.head_dim = text.hidden_size // self.num_heads
        self.layers = list(model.model.language_model.layers)
        self.captured: dict[int, torch.Tensor] = {}
        self._values: torch.Tensor | None = None  # (B, L, H, d)
        self._mask: torch.Tensor | None = None  # (B, L, H) bool
        self.capturing = False
        self._handles = [
            layer.self_attn.o_proj.register_forward_pre_hook(self._hook(i))
            for i, layer in enumerate(self.layers)
        ]

    def _hook(self, index: int):
        def hook(_module, args):
            hidden = args[0]
            if self.capturing:
                self.captured[index] = hidden
            if self._values is None:
                return None
            b = hidden.shape[0]
            last = hidden[:, -1].reshape(b, self.num_heads, self.head_dim)
            mask = self._mask[:, index, :, None]
            patched = torch.where(mask, self._values[:, index], last).reshape(b, 1, -1)
            return (torch.cat([hidden[:, :-1], patched], dim=1), *args[1:])

        return hook

    @contextmanager
    def injecting(self, values: torch.Tensor, mask: torch.Tensor):
        self._values, self._mask = values, mask
        try:
            yield
        finally:
            self._values = self._mask = None

    def remove(self) -> None:
        for handle in self._handles:
            handle.remove()


def episode_vectors(
    captured: dict[int, torch.Tensor],
    k: int,
    *,
    queries: int,
    min_context: int,
    max_context: int | None = None,
) -> torch.Tensor:
    """``(E, L, H*d)``: per episode, the mean over its averaged ``->`` positions of each layer's
    ``o_proj`` input."""
    stop = k - queries if max_context is None else min(k - queries, max_context + 1)
    positions = torch.from_numpy(fmt.answer_positions(k)[min_context:stop])
    return torch.stack([captured[i][:, positions].mean(dim=1) for i in sorted(captured)], dim=1)


def task_vector_loss(
    model,
    outputs: HeadOutputs,
    batch,
    k: int,
    rng: np.random.Generator,
    *,
    queries: int,
    min_context: int,
    head_fraction: float,
    max_context: int | None = None,
) -> tuple[torch.Tensor, np.ndarray]:
    """The loss of zero-shot answers to each episode's last ``queries`` shots with its vector
    written into random heads; returns (loss, hits ``(E, queries)``). Call right after the
    episode's forward pass with ``outputs.capturing`` on."""
    vectors = episode_vectors(
        outputs.captured, k, queries=queries, min_context=min_context, max_context=max_context
    )
    outputs.captured.clear()
    return _zero_shot_loss(
        model, outputs, batch, k, vectors, rng, queries=queries, head_fraction=head_fraction
    )


def chunk_mean_loss(
    model,
    outputs: HeadOutputs,
    batch,
    rng: np.random.Generator,
    *,
    chunks: int,
    shots: int,
    queries: int,
    head_fraction: float,
    query: str = "record",
) -> tuple[torch.Tensor, np.ndarray]:
    """The MTV/DP-MTV read itself as a loss: each episode of ``batch`` (one task, ``chunks * shots
    + queries`` shots) is cut into ``chunks`` disjoint prompts of ``shots`` records, each its own
    sequence, as a DP-MTV partition reads them: with ``query="record"`` ``shots - 1``
    demonstrations and the last record's image as the query (``--query record``), with
    ``"blank"`` all ``shots`` records as demonstrations and a grey image as the query (``--query
    blank``: the last token has no query image to look up an answer for, so it can only carry
    what the demonstrations show). ``v`` = the mean over the episode's prompts of the
    last-token ``o_proj`` inputs, then the zero-shot loss of :func:`task_vector_loss` on the
    episode's last ``queries`` shots.

    Why: the single-context loss averages positions of ONE context, each of which already holds
    the evidence of the positions before it. A mean over independent chunks carries the rule only
    if each chunk's head outputs encode its own evidence so that evidence adds up across chunks
    (a deciding cell seen in a few chunks of 256); a chunk that encodes "the closest trained rule"
    outvotes it."""
    e, k = batch.answers.shape
    used = chunks * shots
    answers = batch.answers[:, :used].reshape(e * chunks, shots)
    images = batch.images.reshape(e, k, *batch.images.shape[1:])[:, :used]
    images = images.reshape(e * chunks, shots, *images.shape[2:])
    if query == "blank":
        blank = np.asarray(blank_image((IMAGE_SIZE, IMAGE_SIZE)), dtype=images.dtype)  # the build's query
        images = np.concatenate([images, np.broadcast_to(blank, (e * chunks, 1, *blank.shape))], axis=1)
    else:
        answers = answers[:, :-1]
    ids = torch.from_numpy(fmt.episode_ids(fmt.ANSWER_TOKEN_IDS[answers], query=True))
    outputs.capturing = True
    model(
        input_ids=ids,
        pixel_values=fmt.pixels_from_uint8(images.reshape(-1, *images.shape[2:])),
        logits_to_keep=1,
    )
    outputs.capturing = False
    last = torch.stack([outputs.captured[i][:, -1] for i in sorted(outputs.captured)], dim=1)  # (E*M, L, H*d)
    outputs.captured.clear()
    vectors = last.reshape(e, chunks, *last.shape[1:]).mean(dim=1)
    return _zero_shot_loss(
        model, outputs, batch, k, vectors, rng, queries=queries, head_fraction=head_fraction
    )


def _zero_shot_loss(
    model,
    outputs: HeadOutputs,
    batch,
    k: int,
    vectors: torch.Tensor,
    rng,
    *,
    queries: int,
    head_fraction: float,
) -> tuple[torch.Tensor, np.ndarray]:
    """Cross-entropy of the zero-shot answers to each episode's last ``queries`` shots with its
    vector ``(E, L, H*d)`` written into a random subset of heads (each with ``head_fraction``)."""
    e, n_layers = vectors.shape[:2]
    values = vectors.reshape(e, n_layers, outputs.num_heads, outputs.head_dim).repeat_interleave(queries, 0)
    mask = torch.from_numpy(rng.uniform(size=(e, n_layers, outputs.num_heads)) < head_fraction)
    mask = mask.repeat_interleave(queries, 0)
    images = batch.images.reshape(e, k, *batch.images.shape[1:])[:, k - queries :]
    pixels = fmt.pixels_from_uint8(images.reshape(-1, *images.shape[2:]))
    ids = torch.from_numpy(fmt.episode_ids(np.zeros((e * queries, 0), dtype=np.int64), query=True))
    targets = torch.from_numpy(fmt.ANSWER_TOKEN_IDS[batch.answers[:, k - queries :]].reshape(-1))
    with outputs.injecting(values, mask):
        logits = model(input_ids=ids, pixel_values=pixels, logits_to_keep=1).logits[:, -1]
    loss = F.cross_entropy(logits, targets)
    with torch.no_grad():
        hits = (logits.argmax(-1) == targets).reshape(e, queries).numpy()
    return loss, hits


@torch.no_grad()
def evaluate_task_vectors(
    model,
    outputs: HeadOutputs,
    eval_set: dict,
    task_index_groups: dict,
    *,
    shots: int = 16,
    head_fraction: float = 0.5,
    seed: int = 0,
) -> dict:
    """MTV accuracy per group: each task's vector is the mean over its ``shots``-shot evaluation
    prompts of the last-token ``o_proj`` inputs, written into one fixed random head subset of its
    zero-shot prompts (a training monitor; the demo's numbers use the package's head search)."""
    many, zero = eval_set[shots], eval_set[0]
    n_layers = len(outputs.layers)
    mask_one = torch.from_numpy(
        np.random.default_rng(seed).uniform(size=(1, n_layers, outputs.num_heads)) < head_fraction
    )
    model.eval()
    per_task = {}
    for t_i in np.unique(many["task_index"]):
        rows = np.flatnonzero(many["task_index"] == t_i)
        per = many["images_per_row"]
        image_rows = np.concatenate([np.arange(r * per, (r + 1) * per) for r in rows])
        outputs.capturing = True
        model(
            input_ids=many["ids"][rows],
            pixel_values=fmt.pixels_from_uint8(many["images"][image_rows]),
            logits_to_keep=1,
        )
        outputs.capturing = False
        vector = torch.stack([outputs.captured[i][:, -1].mean(0) for i in sorted(outputs.captured)])
        outputs.captured.clear()
        queries = np.flatnonzero(zero["task_index"] == t_i)
        values = vector.reshape(1, n_layers, outputs.num_heads, outputs.head_dim).expand(
            len(queries), -1, -1, -1
        )
        with outputs.injecting(values, mask_one.expand(len(queries), -1, -1)):
            logits = model(
                input_ids=zero["ids"][queries],
                pixel_values=fmt.pixels_from_uint8(zero["images"][queries]),
                logits_to_keep=1,
            ).logits[:, -1]
        per_task[int(t_i)] = float((logits.argmax(-1) == zero["targets"][queries]).float().mean())
    model.train()
    return {group: float(np.mean([per_task[i] for i in idx])) for group, idx in task_index_groups.items()}
