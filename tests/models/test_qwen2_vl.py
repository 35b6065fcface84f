from tests.models.contract import AdapterContract


class TestQwen2VLAdapter(AdapterContract):
    family = "qwen2_vl"
