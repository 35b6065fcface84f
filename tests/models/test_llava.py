from tests.models.contract import AdapterContract


class TestLlavaAdapter(AdapterContract):
    family = "llava"
