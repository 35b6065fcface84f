"""The processor side of families the contract suite does not cover yet: chat-template fallbacks,
processor errors as one line naming the family, the torchvision hint, single-image families and
the untested-family warning."""

from __future__ import annotations

import copy
import json
import shutil

import numpy as np
import pytest
import torch
from click.testing import CliRunner

from dpmtv.cli import main
from dpmtv.data.prompts import Example, Prompt
from dpmtv.errors import AdapterError
from dpmtv.models.generic import SINGLE_IMAGE, GenericAdapter
from dpmtv.models.loading import load_model
from dpmtv.models.registry import GENERIC_FAMILIES
from dpmtv.testing import build_tiny_checkpoint
from tests.cli.test_cli import _build_args
from tests.models.contract import random_image

ONE_SHOT = Prompt(
    (Example((random_image(np.random.default_rng(0)),), "What is it?", "a cat"),),
    Example((random_image(np.random.default_rng(1)),), "And this?"),
)
TEXT_ONLY_TEMPLATE = "{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}"


def _without_processor_template(loaded):
    """A copy of the loaded model's adapter whose processor dropped its chat template, as Fuyu's
    and Chameleon's do."""
    processor = copy.deepcopy(loaded.processor)
    processor.chat_template = None
    return type(loaded.adapter)(loaded.model, processor)


def test_no_processor_template_falls_back_to_the_tokenizers(tiny_llava):
    adapter = _without_processor_template(tiny_llava)
    adapter.tokenizer.chat_template = TEXT_ONLY_TEMPLATE
    assert (
        adapter.render_text(ONE_SHOT)
        == "user: <image>What is it?\nassistant: a cat\nuser: <image>And this?\n"
    )
    with torch.no_grad():  # the processor expands the image tokens the fallback wrote
        tiny_llava.model(**adapter.encode([ONE_SHOT]))


def test_no_template_at_all_uses_the_generic_format_and_says_so(tiny_llava):
    adapter = _without_processor_template(tiny_llava)
    adapter.tokenizer.chat_template = None
    with pytest.warns(UserWarning, match="generic 'User: ... / Assistant: ...' format"):  # each render warns
        text = adapter.render_text(ONE_SHOT)
        answered = adapter.render_with_answer(ONE_SHOT, "a dog")
        with torch.no_grad():
            tiny_llava.model(**adapter.encode([ONE_SHOT]))
    assert text == "User: <image>What is it?\nAssistant: a cat\nUser: <image>And this?\nAssistant:"
    assert answered.endswith("User: <image>And this?\nAssistant: a dog")


def test_a_processor_that_cannot_encode_is_one_error_line(tiny_llava):
    adapter = _without_processor_template(tiny_llava)
    adapter.processor.chat_template = TEXT_ONLY_TEMPLATE.replace("m['content']", "'text'")  # no images
    with pytest.raises(AdapterError) as error:
        adapter.encode([ONE_SHOT])
    message = str(error.value)
    assert message.startswith("llava: LlavaProcessor could not encode a prompt: ValueError: ")
    assert "<image> tokens" in message and "\n" not in message


def test_a_processor_that_cannot_load_is_one_error_line(tiny_llava_path, tmp_path):
    broken = tmp_path / "no-image-processor"
    shutil.copytree(tiny_llava_path, broken)
    config = json.loads((broken / "processor_config.json").read_text())
    del config["image_processor"]  # a checkpoint that lost its image processor's settings
    (broken / "processor_config.json").write_text(json.dumps(config))
    image = tmp_path / "q.png"
    random_image(np.random.default_rng(2)).save(image)
    result = CliRunner().invoke(
        main, ["answer", "--model", str(broken), "--image", str(image), "--question", "q"]
    )
    assert result.exit_code == 1 and "Traceback" not in result.output
    assert result.output.startswith(f"error: llava: cannot load the processor at '{broken}': OSError: ")


def test_a_processor_that_needs_torchvision_says_how_to_install_it(tmp_path):
    path = build_tiny_checkpoint("mistral3", tmp_path / "mistral3")
    try:
        import torchvision  # noqa: F401
    except (ImportError, RuntimeError):
        with pytest.raises(AdapterError, match=r"it needs torchvision: pip install torchvision \("):
            load_model(path)
    else:
        pytest.skip("torchvision is installed: Pixtral's processor loads")


def test_fuyu_refuses_several_interleaved_images_with_the_reason():
    from transformers import FuyuConfig, FuyuForCausalLM

    text = dict(
        model_type="persimmon",
        vocab_size=64,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        max_position_embeddings=128,
    )
    config = FuyuConfig(
        vocab_size=64, text_config=text, image_size=8, patch_size=4, hidden_size=32, image_token_id=5
    )
    adapter = GenericAdapter(FuyuForCausalLM(config).eval(), processor=None)
    assert adapter.o_proj_path == "self_attn.dense"  # Persimmon's output projection, discovered
    with pytest.raises(AdapterError, match="a prompt with 2 images is refused") as error:
        adapter.encode([ONE_SHOT])
    assert SINGLE_IMAGE["fuyu"] in str(error.value)
    assert "got_ocr2" in SINGLE_IMAGE


def test_build_answer_and_inspect_say_when_a_family_is_untested(
    tiny_llava_path, records_file, tmp_path, monkeypatch
):
    monkeypatch.delitem(GENERIC_FAMILIES, "llava")  # llava as transformers maps it, untested
    out = tmp_path / "task.safetensors"
    runner = CliRunner()
    image = records_file.parent / "img" / "0.png"
    results = [
        runner.invoke(main, _build_args(tiny_llava_path, records_file, out)),
        runner.invoke(
            main,
            [
                "answer",
                "--model",
                str(tiny_llava_path),
                "--image",
                str(image),
                "--question",
                "q",
                "--max-new-tokens",
                "1",
            ],
        ),
        runner.invoke(main, ["inspect", str(out)]),
    ]
    for result in results:
        assert result.exit_code == 0, result.output
        assert "warning: model_type 'llava' is not tested by dpmtv" in " ".join(result.output.split())
