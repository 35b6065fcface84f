from tests.models.contract import AdapterContract


class TestGemma3Adapter(AdapterContract):
    family = "gemma3"
