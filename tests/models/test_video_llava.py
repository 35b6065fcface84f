from tests.models.contract import AdapterContract


class TestVideoLlavaAdapter(AdapterContract):
    family = "video_llava"
