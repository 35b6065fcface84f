from tests.models.contract import AdapterContract
from tests.models.test_qwen2_vl import MixedImageSizesChecks


class TestQwen2_5_VLAdapter(MixedImageSizesChecks, AdapterContract):  # noqa: N801 (transformers' spelling)
    family = "qwen2_5_vl"
