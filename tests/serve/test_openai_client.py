"""The official openai client, unchanged, against a real uvicorn on a loopback port."""

from __future__ import annotations

import pytest

from tests.serve._live import live_server
from tests.serve.conftest import STEADY_VECTOR, png_data_url

openai = pytest.importorskip(
    "openai", reason="the openai client is in the dev extra: pip install -e '.[dev]'"
)

KEY = "test-key-123"


@pytest.fixture(scope="module")
def client(served):
    from dpmtv.serve import ServeSettings, create_app

    with live_server(create_app(served, ServeSettings(api_key=KEY))) as url:
        yield openai.OpenAI(base_url=f"{url}/v1", api_key=KEY, max_retries=0, timeout=60)


def _messages(seed=0):
    return [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "What is shown?"},
                {"type": "image_url", "image_url": {"url": png_data_url(seed=seed)}},
            ],
        }
    ]


def test_models_list(client, served):
    models = client.models.list()
    assert [model.id for model in models.data] == ["colour", "shape", served.name]
    assert models.data[0].model_extra["dpmtv"]["guarantee"]["epsilon"] == 1.0


def test_chat_completion_and_stream_agree(client):
    completion = client.chat.completions.create(
        model=STEADY_VECTOR, messages=_messages(), max_tokens=6, temperature=0
    )
    text = completion.choices[0].message.content
    assert (
        completion.choices[0].finish_reason in ("stop", "length") and completion.usage.completion_tokens <= 6
    )
    stream = client.chat.completions.create(
        model=STEADY_VECTOR, messages=_messages(), max_tokens=6, stream=True
    )
    streamed = "".join(chunk.choices[0].delta.content or "" for chunk in stream if chunk.choices)
    assert streamed.strip() == text


def test_errors_arrive_as_the_client_exceptions(client):
    with pytest.raises(openai.NotFoundError, match="not served here"):
        client.chat.completions.create(model="nope", messages=_messages())
    with pytest.raises(openai.BadRequestError, match="response_format"):
        client.chat.completions.create(
            model="colour", messages=_messages(), response_format={"type": "json_object"}
        )
    wrong = openai.OpenAI(base_url=str(client.base_url), api_key="wrong", max_retries=0)
    with pytest.raises(openai.AuthenticationError):
        wrong.models.list()
    assert client.chat.completions.create(model="shape", messages=_messages(1), max_tokens=2).choices


def _greedy_tokens(client, **extra):
    extra = {"max_tokens": 8, **extra}
    completion = client.chat.completions.create(
        model=STEADY_VECTOR, messages=_messages(), logprobs=True, top_logprobs=3, **extra
    )
    return completion.choices[0]


SAMPLED = {"temperature": 1.0, "seed": 3, "max_tokens": 12}  # varied tokens (greedy repeats one)


def _boundary_stop(tokens: list[str]) -> str:
    """The last character of one token and the first of the next, where the pair first occurs:
    a stop string no single token holds."""
    text = "".join(tokens)
    for i in range(1, len(tokens) - 1):
        start = len("".join(tokens[: i + 1])) - 1
        stop = text[start : start + 2]
        if tokens[i] and tokens[i + 1] and text.find(stop) == start and stop.strip() == stop:
            return stop
    raise AssertionError(f"no boundary stop in {tokens}")


def _answer_with_a_boundary_stop(client) -> tuple[dict, str, str]:
    """(sampling settings, a stop string across a token boundary, the text before it): the first
    seed whose sampled answer has such a pair after some text (a random-weight model may sample
    mostly special tokens, whose entries are empty, for one seed; the server is deterministic for
    each)."""
    for seed in range(3, 23):
        sampling = {**SAMPLED, "seed": seed}
        choice = _greedy_tokens(client, **sampling)
        tokens = [entry.token for entry in choice.logprobs.content]
        try:
            stop = _boundary_stop(tokens)
        except AssertionError:
            continue
        text = "".join(tokens).lstrip()
        cut = text[: text.find(stop)].strip()
        if cut and cut != choice.message.content:
            return sampling, stop, cut
    raise AssertionError("no seed in 3..22 gave an answer with a stop across a token boundary")


def test_stop_cuts_the_answer_across_a_token_boundary_streaming_or_not(client):
    sampling, stop, cut = _answer_with_a_boundary_stop(client)
    stopped = client.chat.completions.create(
        model=STEADY_VECTOR, messages=_messages(), stop=[stop], **sampling
    )
    assert stopped.choices[0].message.content == cut
    assert stopped.choices[0].finish_reason == "stop"
    stream = client.chat.completions.create(
        model=STEADY_VECTOR, messages=_messages(), stop=stop, stream=True, **sampling
    )
    chunks = [chunk.choices[0] for chunk in stream if chunk.choices]
    streamed = "".join(c.delta.content or "" for c in chunks)
    assert streamed.strip() == cut and chunks[-1].finish_reason == "stop"


def test_logprobs_in_openais_format_streaming_or_not(client):
    choice = _greedy_tokens(client)
    entries = choice.logprobs.content
    assert len(entries) == 8 and "".join(e.token for e in entries).strip() == choice.message.content
    for entry in entries:
        assert entry.logprob <= 0 and bytes(entry.bytes).decode("utf-8") == entry.token
        assert len(entry.top_logprobs) == 3
        # greedy: the chosen token is the most likely one
        assert entry.top_logprobs[0].logprob == pytest.approx(entry.logprob, abs=1e-6)
    stream = client.chat.completions.create(
        model=STEADY_VECTOR, messages=_messages(), max_tokens=8, logprobs=True, top_logprobs=3, stream=True
    )
    streamed = [
        e
        for chunk in stream
        if chunk.choices and chunk.choices[0].logprobs
        for e in chunk.choices[0].logprobs.content
    ]
    assert [(e.token, round(e.logprob, 5)) for e in streamed] == [
        (e.token, round(e.logprob, 5)) for e in entries
    ]


def test_n_choices_and_the_same_seed_gives_the_same_answer(client):
    def sample(seed, n=1):
        completion = client.chat.completions.create(
            model=STEADY_VECTOR, messages=_messages(), max_tokens=8, temperature=1.0, seed=seed, n=n
        )
        return [choice.message.content for choice in completion.choices]

    first, again, other = sample(11), sample(11), sample(12)
    assert first == again and first != other
    three = sample(11, n=3)
    assert len(three) == 3 and three[0] == first[0] and three[1] == other[0]
    greedy = client.chat.completions.create(model=STEADY_VECTOR, messages=_messages(), max_tokens=8, n=2)
    assert greedy.choices[0].message.content == greedy.choices[1].message.content
    assert greedy.usage.completion_tokens == 16


def test_a_multi_turn_conversation_with_images_in_two_user_turns(client):
    messages = [
        {"role": "system", "content": "Answer briefly."},
        *_messages(seed=2),
        {"role": "assistant", "content": "A square."},
        *_messages(seed=3),
    ]
    completion = client.chat.completions.create(model=STEADY_VECTOR, messages=messages, max_tokens=6)
    # answered (the tiny random model's tokens may decode to no text, so the text is not checked)
    assert completion.usage.completion_tokens > 0 and completion.choices[0].finish_reason in (
        "stop",
        "length",
    )
    single = client.chat.completions.create(model=STEADY_VECTOR, messages=_messages(seed=3), max_tokens=6)
    assert completion.usage.prompt_tokens > single.usage.prompt_tokens


def test_text_completions_echo_logprobs_and_stop(client):
    prompt = "The colour of the square is"
    completion = client.completions.create(
        model=STEADY_VECTOR, prompt=prompt, max_tokens=5, logprobs=2, echo=True
    )
    choice = completion.choices[0]
    assert choice.text.startswith(prompt) and completion.object == "text_completion"
    logprobs = choice.logprobs
    prompt_tokens = completion.usage.prompt_tokens
    assert len(logprobs.tokens) == prompt_tokens + completion.usage.completion_tokens
    assert logprobs.token_logprobs[0] is None and all(lp <= 0 for lp in logprobs.token_logprobs[1:])
    assert all(len(top) <= 2 for top in logprobs.top_logprobs[1:])
    # max_tokens 0 with echo scores the prompt alone: the same log-probabilities
    scored = client.completions.create(
        model=STEADY_VECTOR, prompt=prompt, max_tokens=0, logprobs=0, echo=True
    )
    assert scored.choices[0].text == prompt
    assert scored.choices[0].logprobs.token_logprobs[1:] == pytest.approx(
        logprobs.token_logprobs[1:prompt_tokens], abs=1e-5
    )
    answer = client.completions.create(model=STEADY_VECTOR, prompt=prompt, max_tokens=5).choices[0].text
    assert answer == choice.text[len(prompt) :]
    stopped = client.completions.create(model=STEADY_VECTOR, prompt=prompt, max_tokens=5, stop=[answer[1:3]])
    assert stopped.choices[0].text == answer[: answer.find(answer[1:3])]
    with pytest.raises(openai.BadRequestError, match="suffix"):
        client.completions.create(model=STEADY_VECTOR, prompt=prompt, suffix="!")
