from tests.models.contract import AdapterContract


class TestQianfanOCRAdapter(AdapterContract):
    family = "qianfan_ocr"
