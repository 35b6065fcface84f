from tests.models.contract import AdapterContract


class TestInternVLAdapter(AdapterContract):
    family = "internvl"
