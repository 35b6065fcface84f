from tests.models.model_only import ModelOnlyContract


class TestLlama4ModelOnly(ModelOnlyContract):
    family = "llama4"

    def _forward(self, adapter, input_ids):
        # transformers 5.24's Llama4ForConditionalGeneration fails on text-only input (it reads
        # ``image_outputs`` from the text model's output), so the checks run its language model,
        # which holds every patched projection.
        return adapter.model.language_model(input_ids=input_ids)
