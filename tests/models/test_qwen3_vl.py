from tests.models.contract import AdapterContract


class TestQwen3VLAdapter(AdapterContract):
    family = "qwen3_vl"
