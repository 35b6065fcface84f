from tests.models.contract import AdapterContract


class TestPaliGemmaAdapter(AdapterContract):
    family = "paligemma"

    def test_renders_images_first_then_one_prefix_line(self, loaded, prompts):
        text = loaded.adapter.render_text(prompts[0])
        assert text == "<image>" * 3 + "What is it? a cat\nWhat is it? a dog\nWhat is it?"
        assert loaded.adapter.render_with_answer(prompts[0], "a cow") == text + "\na cow"
