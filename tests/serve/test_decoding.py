"""The server's answers against direct computations with the patched model: log-probabilities,
multi-turn conversations, sampling's independence of the batch."""

from __future__ import annotations

import threading

import torch

from dpmtv.data.prompts import Example, Prompt, zero_shot
from dpmtv.inference import answer_encoded, apply
from dpmtv.serve._decoding import Decoding
from dpmtv.serve._generation import RowRequest, generate_rows
from dpmtv.serve._images import image_from_data_url
from tests.serve.conftest import png_data_url


def _image(seed: int):
    return image_from_data_url(png_data_url(seed=seed), max_pixels=10**6, param="x")


def _row(prompt: Prompt, served, **decoding) -> RowRequest:
    return RowRequest(prompt, served.vectors["colour"], 4, threading.Event(), decoding=Decoding(**decoding))


def test_logprobs_equal_the_patched_models_own(served):
    prompt = zero_shot(Example((_image(0),), "What is shown?"))
    [result] = generate_rows(served, [_row(prompt, served, logprobs=True, top_logprobs=2)])
    adapter = served.loaded.adapter
    with apply(served.loaded, served.vectors["colour"].vector), torch.no_grad():
        logits = served.loaded.model(**adapter.encode([prompt])).logits[0, -1].float()
    expected = torch.log_softmax(logits, dim=-1)
    first = result.logprobs[0]
    assert first.token == adapter.tokenizer.decode([int(expected.argmax())], skip_special_tokens=True)
    scale = float(expected.abs().max())
    assert abs(first.logprob - float(expected.max())) <= 1e-5 * scale


def test_a_multi_turn_row_answers_as_its_conversation_does(served):
    earlier = Example((_image(1),), "What is shown?", "A square.")
    prompt = Prompt((earlier,), Example((_image(2),), "And here?"))
    [result] = generate_rows(served, [_row(prompt, served)])
    encoded = [served.loaded.adapter.encode([prompt])]
    vector = served.vectors["colour"].vector
    assert result.text == answer_encoded(served.loaded, encoded, vector=vector, max_new_tokens=4)[0]


def test_a_sampled_row_does_not_depend_on_the_rest_of_its_batch(served):
    prompt = zero_shot(Example((_image(0),), "What is shown?"))
    alone = generate_rows(served, [_row(prompt, served, temperature=1.0, seed=5)])
    other = zero_shot(Example((_image(4),), "What is this?"))
    mixed = generate_rows(
        served,
        [
            _row(other, served),
            _row(prompt, served, temperature=1.0, seed=5),
            _row(other, served, temperature=1.0),
        ],
    )
    assert mixed[1].text == alone[0].text
