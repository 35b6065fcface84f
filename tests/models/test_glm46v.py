from tests.models.contract import AdapterContract


class TestGlm46vAdapter(AdapterContract):
    family = "glm46v"
