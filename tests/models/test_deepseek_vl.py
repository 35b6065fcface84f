from tests.models.contract import AdapterContract


class TestDeepseekVLAdapter(AdapterContract):
    family = "deepseek_vl"
