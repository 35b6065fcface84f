from tests.models.contract import AdapterContract


class TestQwen3_5Adapter(AdapterContract):
    family = "qwen3_5"
