from tests.models.contract import AdapterContract


class TestIdefics3Adapter(AdapterContract):
    family = "idefics3"
