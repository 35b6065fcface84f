from tests.models.contract import AdapterContract


class TestIdefics2Adapter(AdapterContract):
    family = "idefics2"
