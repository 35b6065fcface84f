"""Evaluation encodes each prompt once: ICL prompts are measured by the batch that answers them,
and the test queries are encoded once for every method that answers them, with the inputs and
answers of encoding them again each time."""

from __future__ import annotations

import pytest
import torch

import dpmtv.eval.methods
from dpmtv.data import load_records
from dpmtv.data.prompts import Example, Prompt
from dpmtv.eval import LoadOptions, load_record_files
from dpmtv.eval.generation import encoded_within_budget, fit_demonstrations, prompt_length
from dpmtv.eval.methods import EvalSettings, _clean, parse_methods
from dpmtv.eval.runner import run_evaluation
from dpmtv.inference import answer_queries
from tests.conftest import write_records


@pytest.fixture
def icl_prompts(tmp_path):
    records = load_records(write_records(tmp_path / "r", 12))
    examples = [Example(r.load_images(), r.question, r.answer) for r in records]
    query = Example(examples[0].images, examples[0].question, None)
    return [Prompt(tuple(examples[i : i + shots]), query) for i, shots in ((1, 2), (3, 5), (4, 1), (6, 4))]


@pytest.fixture
def counted_encodes(tiny_llava, monkeypatch):
    calls: list[int] = []
    real = tiny_llava.adapter.encode

    def counting(prompts, **kwargs):
        calls.append(len(prompts))
        return real(prompts, **kwargs)

    monkeypatch.setattr(tiny_llava.adapter, "encode", counting)
    return calls


def _fitted(adapter, prompts, budget):
    kept = [fit_demonstrations(adapter, p.demonstrations, p.query, budget=budget) for p in prompts]
    return [Prompt(p.demonstrations[:k], p.query) for p, k in zip(prompts, kept, strict=True)], kept


@pytest.mark.parametrize("cut", [False, True])
def test_icl_batches_are_the_prompts_cut_alone_and_encoded_once_when_they_fit(
    tiny_llava, icl_prompts, cut, counted_encodes
):
    adapter = tiny_llava.adapter
    lengths = sorted(prompt_length(adapter, p) for p in icl_prompts)
    budget = lengths[1] if cut else lengths[-1]  # cut: the two longest prompts lose demonstrations
    fitted, kept = _fitted(adapter, icl_prompts, budget)
    assert (kept != [len(p.demonstrations) for p in icl_prompts]) == cut
    expected = adapter.encode(fitted)
    counted_encodes.clear()
    (inputs, got), *rest = encoded_within_budget(adapter, icl_prompts, budget=budget, batch_size=8)
    assert rest == [] and got == kept
    assert inputs.keys() == expected.keys()
    for key in expected:
        assert torch.equal(inputs[key], expected[key]), key
    assert counted_encodes[0] == len(icl_prompts)  # measured by the batch that answers them
    if not cut:
        assert counted_encodes == [len(icl_prompts)]  # no prompt encoded alone first


def test_queries_are_encoded_once_for_every_method_with_the_same_answers(tiny_llava, tmp_path, monkeypatch):
    calls = []
    real = dpmtv.eval.methods.encode_queries

    def counting(*args, **kwargs):
        calls.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(dpmtv.eval.methods, "encode_queries", counting)
    benchmark = load_record_files(
        write_records(tmp_path / "private", 8), write_records(tmp_path / "queries", 3, seed=1), LoadOptions()
    )
    settings = EvalSettings(
        methods=parse_methods("zero-shot,mtv,dp-mtv"),
        epsilons=(0.5, 2.0),
        seeds=(0,),
        l2_clip_norm=(2.0,),
        shots_per_chunk=4,
        max_new_tokens=2,
        batch_size=2,
        queries_repeats=1,
        allow_non_private=True,
        progress=False,
    )
    runs = run_evaluation(tiny_llava, benchmark, settings, heads="layers:0").runs
    assert len(runs) == 1 + 1 + 3  # zero-shot, mtv, dp-mtv at 0.5, 1 (queries plot), 2
    assert calls == [1]  # five answer passes over one encoding
    queries = [Example(r.load_images(), r.question, None) for r in benchmark.test]
    alone = answer_queries(tiny_llava, queries, max_new_tokens=2, batch_size=2)
    assert runs[0].method == "zero-shot" and runs[0].predictions == _clean(alone)
