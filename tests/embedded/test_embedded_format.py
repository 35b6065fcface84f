"""The checkpoint format: chat template == training string, processor == training ids/pixels,
and a saved folder reloads through the Auto classes as a LlavaProcessor + Llava model."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from transformers import AutoModelForImageTextToText, AutoProcessor, LlavaProcessor

from dpmtv.data.prompts import Example, Prompt, blank_image, chat_messages
from dpmtv.embedded import checkpoint_format as fmt
from dpmtv.embedded import generator as gen
from tests._tolerance import assert_close_to_scale


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    folder = tmp_path_factory.mktemp("embedded")
    model = fmt.build_model(0).eval()
    model.save_pretrained(folder)
    fmt.build_processor().save_pretrained(folder)
    return folder, model


def _messages(answers):
    """What the adapters send the chat template (``dpmtv.data.prompts.chat_messages``): one image per turn."""
    image = blank_image((24, 24))
    demos = tuple(Example((image,), gen.QUESTION, answer) for answer in answers)
    return chat_messages(Prompt(demos, Example((image,), gen.QUESTION)))


def test_two_shot_prompt_string_is_the_training_format():
    processor = fmt.build_processor()
    text = processor.apply_chat_template(
        _messages(["red", "yes"]), add_generation_prompt=True, tokenize=False
    )
    assert text == "<bos><image>->red<eos><image>->yes<eos><image>->"


@pytest.mark.parametrize("answers", [[], ["big"], ["no", "yes", "yes", "no", "yes"]])
def test_template_renders_training_string(answers):
    processor = fmt.build_processor()
    text = processor.apply_chat_template(_messages(answers), add_generation_prompt=True, tokenize=False)
    assert text == fmt.render_training_string(answers)
    # string content and a question-first user turn render the same
    messages = _messages(answers)
    for m in messages:
        if m["role"] == "assistant":
            m["content"] = m["content"][0]["text"]
        else:
            m["content"] = m["content"][::-1]
    assert processor.apply_chat_template(messages, add_generation_prompt=True, tokenize=False) == text


def test_processor_reproduces_training_ids_and_pixels():
    processor = fmt.build_processor()
    processor.tokenizer.padding_side = "left"
    rng = np.random.default_rng(0)
    answers = ["circle", "square", "cross"]
    codes = gen.sample_attributes(rng, 4)
    pixels = gen.render(codes, rng)
    text = processor.apply_chat_template(_messages(answers), add_generation_prompt=True, tokenize=False)
    batch = processor(text=[text], images=gen.to_pil(pixels), return_tensors="pt")
    ids = fmt.episode_ids(np.array([[fmt.VOCAB[a] for a in answers]]), query=True)
    assert batch["input_ids"][0].tolist() == ids[0].tolist()
    assert int((batch["input_ids"] == fmt.IMAGE_ID).sum()) == 4 * fmt.IMAGE_TOKENS
    torch.testing.assert_close(batch["pixel_values"], fmt.pixels_from_uint8(pixels), atol=1e-6, rtol=0)


def test_saved_folder_loads_through_auto_classes(saved):
    folder, model = saved
    processor = AutoProcessor.from_pretrained(folder)
    assert isinstance(processor, LlavaProcessor)
    loaded = AutoModelForImageTextToText.from_pretrained(folder).eval()
    assert type(loaded).__name__ == "LlavaForConditionalGeneration"
    assert loaded.lm_head.weight.data_ptr() == loaded.model.language_model.embed_tokens.weight.data_ptr()
    size = sum(p.stat().st_size for p in folder.iterdir())
    assert size < 10_000_000
    assert processor.apply_chat_template(
        _messages(["red", "yes"]), add_generation_prompt=True, tokenize=False
    ) == fmt.render_training_string(["red", "yes"])

    # a left-padded batch of prompts with different shot counts runs, last token = "->"
    processor.tokenizer.padding_side = "left"
    rng = np.random.default_rng(1)
    images = gen.to_pil(gen.render(gen.sample_attributes(rng, 4), rng))
    texts = [
        processor.apply_chat_template(_messages(a), add_generation_prompt=True, tokenize=False)
        for a in (["red", "blue"], [])
    ]
    batch = processor(text=texts, images=images, padding=True, return_tensors="pt")
    assert (batch["input_ids"][:, -1] == fmt.ARROW_ID).all()
    with torch.no_grad():
        logits = loaded(**batch).logits[:, -1]
        single = loaded(**processor(text=texts[1:], images=images[3:], return_tensors="pt")).logits[:, -1]
        reference = model(**batch).logits[:, -1]
    assert_close_to_scale(logits[1], single[0])
    assert_close_to_scale(logits, reference)
    # odd-sized images are resized to 24 px, so the image-token count still matches
    other = processor(text=texts[1:], images=[images[0].resize((37, 20))], return_tensors="pt")
    assert other["pixel_values"].shape == (1, 3, 24, 24)
