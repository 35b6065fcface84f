from tests.models.contract import AdapterContract


class TestQwen3VlMoeAdapter(AdapterContract):
    family = "qwen3_vl_moe"
