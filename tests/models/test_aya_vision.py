from tests.models.contract import AdapterContract


class TestAyaVisionAdapter(AdapterContract):
    family = "aya_vision"
