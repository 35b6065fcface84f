from tests.models.contract import AdapterContract


class TestPaliGemmaAdapter(AdapterContract):
    family = "paligemma"
