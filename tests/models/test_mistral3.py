from tests.models.model_only import ModelOnlyContract


class TestMistral3ModelOnly(ModelOnlyContract):
    family = "mistral3"
