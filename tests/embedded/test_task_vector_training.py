"""The training aid of scripts/task_vector_training.py: which positions a vector averages, which
heads it overwrites, and that its gradient reaches the demonstrations' forward pass."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import numpy as np
import torch

from dpmtv.embedded import checkpoint_format as fmt
from dpmtv.embedded import episodes

SCRIPTS = Path(__file__).resolve().parents[2] / "scripts"


def _module():
    spec = importlib.util.spec_from_file_location("task_vector_training", SCRIPTS / "task_vector_training.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("task_vector_training", module)
    spec.loader.exec_module(module)
    return module


def test_the_vector_averages_the_arrow_positions_between_the_context_floor_and_the_queries():
    tvt = _module()
    k, queries, min_context = 12, 4, 3
    length = fmt.episode_ids(np.zeros((1, k), dtype=np.int64)).shape[1]
    captured = {0: torch.arange(length, dtype=torch.float32).reshape(1, length, 1).expand(2, -1, 3)}
    vectors = tvt.episode_vectors(captured, k, queries=queries, min_context=min_context)
    expected = float(np.mean(fmt.answer_positions(k)[min_context : k - queries]))
    assert vectors.shape == (2, 1, 3)
    assert torch.allclose(vectors, torch.full_like(vectors, expected))
    # every averaged position comes before the first query shot's image
    assert fmt.answer_positions(k)[k - queries - 1] < 1 + fmt.TOKENS_PER_SHOT * (k - queries)


def test_injection_overwrites_the_masked_heads_at_the_last_position_only():
    tvt = _module()
    model = fmt.build_model(0).eval()
    outputs = tvt.HeadOutputs(model)
    seen: list[torch.Tensor] = []  # o_proj's input as the projection received it (after the pre-hook)
    model.model.language_model.layers[1].self_attn.o_proj.register_forward_hook(
        lambda _m, args, _out: seen.append(args[0].detach().clone())
    )
    ids = torch.from_numpy(fmt.episode_ids(np.zeros((2, 0), dtype=np.int64), query=True))
    pixels = fmt.pixels_from_uint8(np.random.default_rng(0).integers(0, 255, (2, 24, 24, 3), dtype=np.uint8))
    h, d = outputs.num_heads, outputs.head_dim
    values = torch.full((2, len(outputs.layers), h, d), 7.0)
    mask = torch.zeros((2, len(outputs.layers), h), dtype=torch.bool)
    mask[0, 1, 2] = True
    with torch.no_grad():
        model(input_ids=ids, pixel_values=pixels)
        with outputs.injecting(values, mask):
            model(input_ids=ids, pixel_values=pixels)
    plain, patched = (x.reshape(2, -1, h, d) for x in seen)
    want = plain.clone()
    want[0, -1, 2] = 7.0  # layers before 1 are untouched (mask), so layer 1's input is the same
    assert torch.equal(patched, want)


def test_the_loss_reaches_the_demonstrations_pass():
    tvt = _module()
    model = fmt.build_model(0)
    outputs = tvt.HeadOutputs(model)
    rng = np.random.default_rng(0)
    k = 10
    batch = episodes.sample_episodes(rng, 2, k, mix=episodes.TRAINING_MIX)
    ids = torch.from_numpy(fmt.episode_ids(fmt.ANSWER_TOKEN_IDS[batch.answers]))
    outputs.capturing = True
    model(input_ids=ids, pixel_values=fmt.pixels_from_uint8(batch.images))
    outputs.capturing = False
    loss, hits = tvt.task_vector_loss(
        model, outputs, batch, k, rng, queries=3, min_context=2, head_fraction=1.0
    )
    loss.backward()
    assert hits.shape == (2, 3) and torch.isfinite(loss)
    # with every head overwritten, the query pass reads nothing of its own layer-0 attention: the
    # gradient of the first layer's value projection comes from the demonstrations' pass
    grad = model.model.language_model.layers[0].self_attn.v_proj.weight.grad
    assert grad is not None and grad.abs().sum() > 0


CHUNKS, SHOTS, QUERIES = 3, 4, 2


def _chunk_mean_run(query: str, head_fraction: float):
    """One chunk-mean loss on 2 tasks; returns the model, batch, loss, hits, the first layer's
    ``o_proj`` input shape and the pixels the vision tower saw in the chunks' pass."""
    tvt = _module()
    model = fmt.build_model(0)
    outputs = tvt.HeadOutputs(model)
    batch = episodes.sample_episodes(
        np.random.default_rng(0), 2, CHUNKS * SHOTS + QUERIES, mix=episodes.TRAINING_MIX
    )
    shapes, pixels = [], []
    layer = model.model.language_model.layers[0].self_attn.o_proj
    handles = [
        layer.register_forward_pre_hook(lambda _m, args: shapes.append(args[0].shape)),
        model.model.vision_tower.register_forward_pre_hook(lambda _m, args: pixels.append(args[0])),
    ]
    loss, hits = tvt.chunk_mean_loss(
        model, outputs, batch, np.random.default_rng(1), chunks=CHUNKS, shots=SHOTS, queries=QUERIES,
        head_fraction=head_fraction, query=query,
    )  # fmt: skip
    for handle in handles:
        handle.remove()
    return model, batch, loss, hits, shapes[0], pixels[0]


def test_the_chunk_mean_loss_averages_disjoint_chunk_prompts_read_at_their_query():
    """Each task's vector comes from its chunks, each its own sequence (s - 1 demonstrations and
    the s-th image as the query), and the gradient reaches the chunks' pass."""
    model, _, loss, hits, shape, _ = _chunk_mean_run("record", head_fraction=1.0)
    loss.backward()
    length = fmt.episode_ids(np.zeros((1, SHOTS - 1), dtype=np.int64), query=True).shape[1]
    assert shape[:2] == (2 * CHUNKS, length)  # one sequence per chunk, s - 1 shots and the query
    assert hits.shape == (2, QUERIES) and torch.isfinite(loss)
    # every head overwritten: the first layer's value projection learns only through the chunks
    grad = model.model.language_model.layers[0].self_attn.v_proj.weight.grad
    assert grad is not None and grad.abs().sum() > 0


def test_the_chunk_mean_loss_with_a_blank_query_reads_every_record_then_the_packages_blank_image():
    """``query="blank"``: all s records are demonstrations and the query image is the one the
    package's ``--query blank`` build shows the model (dpmtv.data.prompts.blank_image through the
    processor)."""
    from dpmtv.data.prompts import blank_image

    _, batch, loss, _, shape, seen = _chunk_mean_run("blank", head_fraction=0.5)
    length = fmt.episode_ids(np.zeros((1, SHOTS), dtype=np.int64), query=True).shape[1]
    assert shape[:2] == (2 * CHUNKS, length)  # s demonstrations and the query
    pixels = seen.reshape(2 * CHUNKS, SHOTS + 1, *seen.shape[1:])
    blank = fmt.build_processor().image_processor(blank_image(), return_tensors="pt")["pixel_values"][0]
    torch.testing.assert_close(pixels[:, -1], blank.expand_as(pixels[:, -1]), atol=1e-6, rtol=0)
    torch.testing.assert_close(pixels[0, :SHOTS], fmt.pixels_from_uint8(batch.images[:SHOTS]))
    assert torch.isfinite(loss)
