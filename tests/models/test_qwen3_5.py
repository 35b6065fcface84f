"""Qwen3.5's hybrid decoder is refused, by the registry and by discovery on the real layout."""

import pytest

from dpmtv.errors import AdapterError, UnsupportedModelError
from dpmtv.models.generic import GenericAdapter
from dpmtv.models.loading import load_model
from dpmtv.testing import build_tiny_checkpoint


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    return build_tiny_checkpoint("qwen3_5", tmp_path_factory.mktemp("qwen3_5"))


def test_load_model_refuses_naming_the_linear_attention_layers(checkpoint):
    with pytest.raises(UnsupportedModelError, match="qwen3_5.*linear-attention layers"):
        load_model(checkpoint)


def test_discovery_itself_refuses_the_layer_without_an_attention_projection(checkpoint):
    from transformers import AutoModelForImageTextToText

    model = AutoModelForImageTextToText.from_pretrained(checkpoint)
    with pytest.raises(AdapterError, match="layer 0 .*no attention block.*linear_attn"):
        GenericAdapter(model, processor=None)
