import json
import shutil
from pathlib import Path
from types import SimpleNamespace

from dpmtv.models.families import smolvlm
from tests.models.contract import AdapterContract


class TestSmolVLMAdapter(AdapterContract):
    family = "smolvlm"

    def test_processor_is_image_only_around_the_checkpoint_parts(self, loaded):
        processor = loaded.processor
        assert type(processor).__name__ == "Idefics3Processor"
        assert type(processor.image_processor).__name__ == "SmolVLMImageProcessorPil"
        assert processor.chat_template.startswith("<|im_start|>")

    def test_image_seq_len_falls_back_to_the_model_config(self, loaded, tmp_path):
        saved = json.loads((Path(loaded.name_or_path) / "processor_config.json").read_text())
        shutil.copy(Path(loaded.name_or_path) / "config.json", tmp_path / "config.json")
        assert smolvlm._image_seq_len(str(tmp_path)) == saved["image_seq_len"]

    def test_chat_template_jinja_file_wins(self, tmp_path):
        (tmp_path / "chat_template.jinja").write_text("JINJA")
        (tmp_path / "chat_template.json").write_text(json.dumps({"chat_template": "JSON"}))
        tokenizer = SimpleNamespace(chat_template="TOKENIZER")
        assert smolvlm._chat_template(str(tmp_path), tokenizer) == "JINJA"
        (tmp_path / "chat_template.jinja").unlink()
        assert smolvlm._chat_template(str(tmp_path), tokenizer) == "JSON"
