"""The evaluation extracts DP-MTV's chunks once per seed and releases them at every ε, with
results equal to one full build per ε (same seeded partition, clipped sum and noise draws)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

import dpmtv.pipeline.tasks
from dpmtv.errors import ParameterError
from dpmtv.eval import LoadOptions, load_record_files
from dpmtv.eval.methods import EvalSettings, MethodContext, MethodSpec, _dp_mtv_settings
from dpmtv.eval.runner import run_evaluation
from dpmtv.heads import parse_head_spec
from dpmtv.inference import answer_queries
from dpmtv.pipeline.build import BuildSettings, build_task_vector, build_task_vectors_for_epsilons
from tests.conftest import write_records

SEEDED = BuildSettings(
    epsilon=1.0,
    delta=1e-5,
    l2_clip_norm=(2.0,),
    shots_per_chunk=4,
    insecure_seed=7,
    allow_insecure_seed=True,
    center="blank",
    progress=False,
)


@pytest.fixture
def counted_extractions(monkeypatch):
    calls = []
    real = dpmtv.pipeline.tasks.extract_each_chunk

    def counting(*args, **kwargs):
        calls.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(dpmtv.pipeline.tasks, "extract_each_chunk", counting)
    return calls


def test_one_extraction_gives_each_epsilons_build(tiny_llava, records_file, counted_extractions):
    from dpmtv.data import load_records

    records = load_records(records_file)
    heads = parse_head_spec("layers:0-1", tiny_llava.adapter.geometry)
    epsilons = [0.5, 2.0, 8.0]
    together = build_task_vectors_for_epsilons(tiny_llava, records, heads, SEEDED, epsilons=epsilons)
    assert len(counted_extractions) == 1
    for epsilon, result in zip(epsilons, together, strict=True):
        alone = build_task_vector(tiny_llava, records, heads, replace(SEEDED, epsilon=epsilon))
        assert np.array_equal(result.vector.values, alone.vector.values)  # identical by construction
        assert np.array_equal(result.vector.reference, alone.vector.reference)
        mine, theirs = result.vector.metadata.privacy, alone.vector.metadata.privacy
        assert mine.model_dump() == theirs.model_dump()
        assert result.warnings == alone.warnings
    assert len(counted_extractions) == 1 + len(epsilons)


def test_several_releases_need_the_seeded_mode(tiny_llava, records_file):
    from dpmtv.data import load_records

    heads = parse_head_spec("layers:0", tiny_llava.adapter.geometry)
    unseeded = replace(SEEDED, insecure_seed=None, allow_insecure_seed=False)
    with pytest.raises(ParameterError, match="composes"):
        build_task_vectors_for_epsilons(
            tiny_llava, load_records(records_file), heads, unseeded, epsilons=[1.0]
        )


def test_eval_extracts_once_per_seed_and_answers_as_per_epsilon_builds(
    tiny_llava, tmp_path, counted_extractions
):
    benchmark = load_record_files(
        write_records(tmp_path / "private", 12), write_records(tmp_path / "queries", 3, seed=1), LoadOptions()
    )
    settings = EvalSettings(
        methods=(MethodSpec("dp-mtv"),),
        epsilons=(0.5, 2.0),
        seeds=(0, 1),
        l2_clip_norm=(2.0,),
        shots_per_chunk=4,
        max_new_tokens=2,
        queries_repeats=1,
        progress=False,
    )
    results = run_evaluation(tiny_llava, benchmark, settings, heads="layers:0")
    assert len(results.runs) == 2 * 3  # seeds × (0.5, 1 for the queries plot, 2)
    assert len(counted_extractions) == 2  # once per seed, not per (seed, ε)

    ctx = MethodContext(
        tiny_llava,
        benchmark,
        settings,
        parse_head_spec("layers:0", tiny_llava.adapter.geometry),
        "layers:0",
        None,
    )
    for run in results.runs:
        alone = build_task_vector(
            tiny_llava,
            benchmark.train,
            ctx.heads,
            replace(_dp_mtv_settings(ctx, run.seed), epsilon=run.epsilon),
        )
        answers = answer_queries(
            tiny_llava, ctx.queries(), vector=alone.vector, max_new_tokens=2, batch_size=8
        )
        from dpmtv.eval.methods import _clean

        assert run.predictions == _clean(answers)
        assert run.details["noise_std"] == alone.vector.metadata.privacy.noise_std


def test_mtv_is_the_plain_mean_of_dp_mtvs_chunks_from_the_same_extraction(
    tiny_llava, tmp_path, counted_extractions
):
    from dpmtv.eval.methods import mtv_task_vector
    from dpmtv.forward.extract import mean_selected_heads
    from dpmtv.pipeline.partition import ChunkPrompts
    from dpmtv.pipeline.plan import plan_layout

    benchmark = load_record_files(
        write_records(tmp_path / "private", 10), write_records(tmp_path / "queries", 2, seed=1), LoadOptions()
    )
    settings = EvalSettings(
        methods=(MethodSpec("mtv"), MethodSpec("dp-mtv")),
        epsilons=(1.0,),
        seeds=(3,),
        l2_clip_norm=(1e-3,),  # far below the chunks' norms: DP-MTV clips, MTV must not
        shots_per_chunk=4,
        max_new_tokens=2,
        queries_repeats=1,
        allow_non_private=True,
        progress=False,
    )
    heads = parse_head_spec("layers:0-1", tiny_llava.adapter.geometry)
    ctx = MethodContext(tiny_llava, benchmark, settings, heads, "layers:0-1", None)
    vector, num_chunks = mtv_task_vector(ctx, 3)
    assert num_chunks == 10 // 4 and len(counted_extractions) == 1
    assert set(ctx.dp_mtv_builds[3]) == {1.0}  # DP-MTV's release came from that extraction

    # independently: the build's public partition, each chunk prompt alone, averaged unclipped
    build = _dp_mtv_settings(ctx, 3)
    layout = plan_layout(tiny_llava, benchmark.train, heads, build)
    prompts = ChunkPrompts(
        benchmark.train,
        layout.release_part,
        shots_per_chunk=4,
        query=build.query_source,
        query_question=build.query_question,
    )
    means = mean_selected_heads(tiny_llava.adapter, list(prompts), heads, batch_size=1)
    expected = np.concatenate([means[layer].reshape(-1, vector.values.shape[1]) for layer in heads.layers])
    scale = float(np.abs(expected).max())
    np.testing.assert_allclose(vector.values, expected, rtol=0, atol=1e-5 * scale)
    assert float(np.linalg.norm(vector.values)) > 100 * 1e-3  # not clipped to C
