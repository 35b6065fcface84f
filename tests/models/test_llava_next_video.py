from tests.models.contract import AdapterContract


class TestLlavaNextVideoAdapter(AdapterContract):
    family = "llava_next_video"
