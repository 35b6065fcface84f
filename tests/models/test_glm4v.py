from tests.models.contract import AdapterContract


class TestGlm4vAdapter(AdapterContract):
    family = "glm4v"
