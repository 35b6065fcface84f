from tests.models.contract import AdapterContract


class TestQwen2_5_VLAdapter(AdapterContract):  # noqa: N801 (transformers' spelling)
    family = "qwen2_5_vl"
