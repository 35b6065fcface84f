"""The official openai client, unchanged, against a real uvicorn on a loopback port."""

from __future__ import annotations

import pytest

from tests.serve._live import live_server
from tests.serve.conftest import png_data_url

openai = pytest.importorskip(
    "openai", reason="the openai client is in the dev extra: pip install 'dpmtv[dev]'"
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
        model="colour", messages=_messages(), max_tokens=6, temperature=0
    )
    text = completion.choices[0].message.content
    assert (
        completion.choices[0].finish_reason in ("stop", "length") and completion.usage.completion_tokens <= 6
    )
    stream = client.chat.completions.create(model="colour", messages=_messages(), max_tokens=6, stream=True)
    streamed = "".join(chunk.choices[0].delta.content or "" for chunk in stream if chunk.choices)
    assert streamed.strip() == text


def test_errors_arrive_as_the_client_exceptions(client):
    with pytest.raises(openai.NotFoundError, match="not served here"):
        client.chat.completions.create(model="nope", messages=_messages())
    with pytest.raises(openai.BadRequestError, match="response_format"):
        client.chat.completions.create(model="colour", messages=_messages(), response_format={"type": "json_object"})
    wrong = openai.OpenAI(base_url=str(client.base_url), api_key="wrong", max_retries=0)
    with pytest.raises(openai.AuthenticationError):
        wrong.models.list()
    assert client.chat.completions.create(model="shape", messages=_messages(1), max_tokens=2).choices
