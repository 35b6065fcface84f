from tests.models.contract import AdapterContract
from tests.models.test_qwen2_vl import MixedImageSizesChecks


class TestLlavaOnevisionAdapter(MixedImageSizesChecks, AdapterContract):
    family = "llava_onevision"
