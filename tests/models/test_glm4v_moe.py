from tests.models.contract import AdapterContract


class TestGlm4vMoeAdapter(AdapterContract):
    family = "glm4v_moe"
