"""Config of a tiny remote-code model in the style of the original Qwen-VL (``QWenConfig``):
``kv_channels`` holds the head dim, ``visual`` the vision tower's settings."""

from transformers import PretrainedConfig


class QWenStyleConfig(PretrainedConfig):
    model_type = "qwen_style"

    def __init__(
        self,
        vocab_size=128,
        hidden_size=32,
        num_attention_heads=4,
        num_hidden_layers=2,
        kv_channels=16,
        intermediate_size=64,
        max_position_embeddings=2048,
        visual=None,
        image_pad_id=0,
        **kwargs,
    ):
        self.vocab_size = vocab_size
        self.hidden_size = hidden_size
        self.num_attention_heads = num_attention_heads
        self.num_hidden_layers = num_hidden_layers
        self.kv_channels = kv_channels
        self.intermediate_size = intermediate_size
        self.max_position_embeddings = max_position_embeddings
        self.visual = visual or {"image_size": 16, "patch_size": 8}
        self.image_pad_id = image_pad_id
        super().__init__(**kwargs)
