from tests.models.contract import AdapterContract


class TestVipLlavaAdapter(AdapterContract):
    family = "vipllava"
