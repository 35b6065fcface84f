"""The committed embedded model loads through the generic LLaVA adapter and passes the contract."""

import pytest

from dpmtv.models.loading import load_model
from tests.conftest import TEST_DEVICE
from tests.models.contract import AdapterContract


class TestEmbeddedModel(AdapterContract):
    family = "llava"

    @pytest.fixture(scope="class")
    @classmethod
    def loaded(cls):
        return load_model("embedded", device=TEST_DEVICE)

    def test_renders_the_trained_few_shot_format(self, loaded, prompts):
        text = loaded.adapter.render_text(prompts[0])
        assert text == "<bos><image>->a cat<eos><image>->a dog<eos><image>->"
