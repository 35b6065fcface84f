"""Closed-answer scores: each choice's probability under the vector, checked against the patched
model's own log-probabilities, token by token through its key-value cache as generation runs."""

from __future__ import annotations

import math

import pytest
import torch

from dpmtv.data.prompts import Example, zero_shot
from dpmtv.errors import ParameterError
from dpmtv.inference import apply, choice_probabilities
from dpmtv.serve._images import image_from_data_url
from tests.serve.conftest import png_data_url


def _query(seed: int) -> Example:
    image = image_from_data_url(png_data_url(seed=seed), max_pixels=10**6, param="x")
    return Example((image,), "Is it big?")


def _direct_logprob(loaded, vector, query: Example, choice: str) -> float:
    """Prefill, then one cached step per token of the choice, the vector patched as in answering."""
    adapter = loaded.adapter
    tokens = adapter.tokenizer(choice, add_special_tokens=False)["input_ids"]
    inputs = adapter.encode([zero_shot(query)])
    total = 0.0
    with apply(loaded, vector), torch.no_grad():
        out = loaded.model(**inputs, use_cache=True)
        mask = inputs["attention_mask"]
        for token in tokens:
            total += float(torch.log_softmax(out.logits[0, -1].float(), dim=-1)[token])
            mask = torch.cat([mask, torch.ones_like(mask[:, :1])], dim=1)
            out = loaded.model(input_ids=torch.tensor([[token]]), attention_mask=mask, cache=out.cache)
    return total


def _one_token_words(tokenizer, count: int) -> list[str]:
    words = []
    for token in range(len(tokenizer)):
        word = tokenizer.decode([token], skip_special_tokens=True).strip()
        if word and len(tokenizer(word, add_special_tokens=False)["input_ids"]) == 1 and word not in words:
            words.append(word)
        if len(words) == count:
            return words
    raise AssertionError("no one-token words")


@pytest.mark.parametrize("kind", ["one token each (one row per query)", "several tokens (a row per choice)"])
def test_probabilities_sum_to_one_and_match_the_patched_model(served, kind):
    vector = served.vectors["colour"].vector
    tokenizer = served.loaded.adapter.tokenizer
    if kind.startswith("one"):
        choices = _one_token_words(tokenizer, 3)
    else:
        choices = ["yes", "no", "a long answer of several tokens"]
    lengths = [len(tokenizer(c, add_special_tokens=False)["input_ids"]) for c in choices]
    assert (max(lengths) == 1) == kind.startswith("one")
    queries = [_query(0), _query(1)]
    scores = choice_probabilities(served.loaded, queries, choices, vector=vector, batch_size=4)
    for query, probabilities in zip(queries, scores, strict=True):
        assert list(probabilities) == choices
        assert math.fsum(probabilities.values()) == pytest.approx(1.0, abs=1e-9)
        direct = [_direct_logprob(served.loaded, vector, query, choice) for choice in choices]
        expected = torch.softmax(torch.tensor(direct, dtype=torch.float64), dim=0).tolist()
        assert list(probabilities.values()) == pytest.approx(expected, rel=1e-4, abs=1e-6)


def test_choices_must_be_two_distinct_answers(served):
    with pytest.raises(ParameterError, match="two distinct"):
        choice_probabilities(served.loaded, [_query(0)], ["yes", "yes"])


def test_the_server_scores_choices_as_the_python_api_does(make_app, served):
    from tests.serve.conftest import chat_body
    from tests.serve.test_api import request

    app = make_app()
    body = {**chat_body("colour", text="Is it big?"), "choices": ["yes", "no", "not sure"]}
    response = request(app, "POST", "/v1/choices", json=body)
    assert response.status_code == 200, response.text
    scored = {c["text"]: c["probability"] for c in response.json()["choices"]}
    assert list(scored) == ["yes", "no", "not sure"] and math.fsum(scored.values()) == pytest.approx(1.0)
    [expected] = choice_probabilities(
        served.loaded,
        [_query(0)],
        list(scored),
        vector=served.vectors["colour"].vector,
    )
    assert list(scored.values()) == pytest.approx(list(expected.values()), rel=1e-4, abs=1e-7)
    twice = request(app, "POST", "/v1/choices", json={**body, "choices": ["yes", "yes"]})
    assert twice.status_code == 400 and twice.json()["error"]["param"] == "choices"
    unknown = request(app, "POST", "/v1/choices", json={**body, "model": "nope"})
    assert unknown.status_code == 404
