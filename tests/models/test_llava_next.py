from tests.models.contract import AdapterContract


class TestLlavaNextAdapter(AdapterContract):
    family = "llava_next"
