"""Inference on the embedded model follows the checkpoint's recommended patch mode."""

import pytest

from dpmtv.data.prompts import Example
from dpmtv.embedded.generator import get_task
from dpmtv.embedded.suite import task_records
from dpmtv.heads import HeadSet
from dpmtv.inference import answer_queries
from dpmtv.models.loading import load_model
from dpmtv.pipeline.build import BuildSettings, build_task_vector


@pytest.fixture(scope="module")
def embedded_and_vector():
    loaded = load_model("embedded")
    defaults = loaded.defaults
    settings = BuildSettings(
        epsilon=8.0,
        delta=1e-5,
        l2_clip_norm=tuple(defaults["l2_clip_norm"]),
        shots_per_chunk=8,
        progress=False,
    )
    records = task_records(get_task("name_colour"), 256, seed=0, split="private")
    heads = HeadSet.of(map(tuple, defaults["heads"]))
    return loaded, build_task_vector(loaded, records, heads, settings).vector


def test_the_embedded_checkpoint_recommends_prefill_only(embedded_and_vector):
    loaded, _ = embedded_and_vector
    assert loaded.patch_mode == "prefill-only"


def test_default_answers_are_single_words_and_every_call_differs_only_after_the_first(embedded_and_vector):
    loaded, vector = embedded_and_vector
    queries = [
        Example(r.images, r.question) for r in task_records(get_task("name_colour"), 6, seed=1, split="test")
    ]
    default = answer_queries(loaded, queries, vector=vector, max_new_tokens=3)
    assert all(len(answer.split()) == 1 for answer in default)
    # the modes patch the prefill alike, so the first word is the same; they differ only after it
    # (the v2 checkpoint repeated its answer under every-call; v3, trained with written vectors, stops)
    every_call = answer_queries(loaded, queries, vector=vector, max_new_tokens=3, mode="every-call")
    assert [answer.split()[0] for answer in every_call] == default
