from tests.models.contract import AdapterContract


class TestMllamaAdapter(AdapterContract):
    family = "mllama"

    def test_cross_attention_layer_heads_are_read(self, loaded):
        assert loaded.adapter.o_proj_paths == ["self_attn.o_proj", "cross_attn.o_proj"]
