"""The registry: every family's status, refusals with reasons, and generic discovery's refusals."""

from pathlib import Path

import pytest
from transformers import AutoModelForImageTextToText, T5Config

from dpmtv.errors import AdapterError, UnsupportedModelError
from dpmtv.models.generic import GenericAdapter, decoder_config
from dpmtv.models.registry import GENERIC_FAMILIES, REFUSED, adapter_for, family_entry, known_model_types
from dpmtv.testing import TINY_FAMILIES

TESTS = Path(__file__).parent


@pytest.mark.parametrize("model_type", sorted(REFUSED))
def test_refused_families_raise_with_their_reason(model_type):
    with pytest.raises(UnsupportedModelError, match=f"'{model_type}' is not supported: it is "):
        adapter_for(model_type)


def test_every_family_with_an_adapter_has_a_tiny_checkpoint_and_a_test():
    for model_type in known_model_types():
        if family_entry(model_type).status in ("generic", "special-cased"):
            assert model_type in TINY_FAMILIES, model_type
            assert (TESTS / f"test_{model_type}.py").is_file(), model_type


def test_statuses():
    assert family_entry("llava").status == "generic" and "llava" in GENERIC_FAMILIES
    assert family_entry("qwen2_vl").status == "special-cased"
    assert "video processor" in family_entry("qwen2_vl").reason
    assert family_entry("florence2").status == "refused"
    assert family_entry("some_future_vlm").status == "untested"


def test_encoder_decoder_configs_are_refused_by_discovery():
    with pytest.raises(AdapterError, match="encoder-decoder generator"):
        decoder_config(T5Config())


def test_a_decoder_without_attention_projections_is_refused_naming_the_layer(tiny_llava_path):
    """A model whose layers have no attention output projection (here: renamed away) gets a
    refusal that names the layer and what was looked for, not a traceback from deep inside."""
    model = AutoModelForImageTextToText.from_pretrained(tiny_llava_path)
    for layer in model.model.language_model.layers:
        layer.mixer = layer.self_attn
        del layer.self_attn
    with pytest.raises(AdapterError, match="layer 0 .*no attention block with a linear output projection"):
        GenericAdapter(model, processor=None)


def test_a_head_dim_that_does_not_split_the_projection_is_refused(tiny_llava_path):
    model = AutoModelForImageTextToText.from_pretrained(tiny_llava_path)
    model.config.text_config.head_dim = 7  # explicit head_dim wins, and 4*7 != 64
    with pytest.raises(AdapterError, match=r"expected num_heads\*head_dim = 4\*7 = 28"):
        GenericAdapter(model, processor=None)


def test_a_model_type_transformers_cannot_load_as_a_vlm_is_refused_listing_the_families():
    with pytest.raises(
        UnsupportedModelError, match="no dpmtv adapter for model_type 'bert'.*LLaVA \\(llava\\)"
    ):
        adapter_for("bert")
