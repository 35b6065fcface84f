"""The embedded model's checkpoint format: config, tokenizer, image processor, processor and the
chat template that renders the few-shot format the model was trained on.

Prompt format (what :data:`CHAT_TEMPLATE` renders and training uses)::

    <bos><image>->red<eos><image>->yes<eos><image>->

- ``<bos>`` once at the start (the tokenizer adds nothing by itself: no post-processor);
- every ``{"type": "image"}`` item of a user turn renders as one ``<image>`` placeholder, which
  ``LlavaProcessor`` expands to :data:`IMAGE_TOKENS` = 4 ``<image>`` tokens (2x2 patches of 12 px;
  the CLIP CLS feature is dropped: ``vision_feature_select_strategy="default"`` with
  ``num_additional_image_tokens=1``). User text (the question) is ignored: the embedded tasks are
  defined by their demonstrations only, and their records carry the fixed public question
  :data:`~dpmtv.embedded.generator.QUESTION`;
- every assistant turn renders as ``"->" + answer + "<eos>"``: ``<eos>`` ends each answer, and the
  model is trained to emit it after an answer word, so ``generate`` stops after one word;
- the generation prompt is ``"->"``: the model's answer is the next token (greedy).

Token ids are fixed (:data:`VOCAB`), so training can build the same ids directly without
rendering strings; the tests check that both routes agree.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch
from tokenizers import AddedToken, Tokenizer, models, pre_tokenizers
from transformers import (
    CLIPImageProcessorPil,
    CLIPVisionConfig,
    LlamaConfig,
    LlavaConfig,
    LlavaForConditionalGeneration,
    LlavaProcessor,
    PreTrainedTokenizerFast,
)

from dpmtv.embedded.generator import ANSWER_WORDS
from dpmtv.embedded.render import IMAGE_SIZE

PAD, BOS, EOS, UNK, IMAGE, ARROW = "<pad>", "<bos>", "<eos>", "<unk>", "<image>", "->"
SPECIAL_TOKENS: tuple[str, ...] = (PAD, BOS, EOS, UNK, IMAGE, ARROW)
VOCAB: dict[str, int] = {tok: i for i, tok in enumerate((*SPECIAL_TOKENS, *ANSWER_WORDS))}
PAD_ID, BOS_ID, EOS_ID, UNK_ID, IMAGE_ID, ARROW_ID = (VOCAB[t] for t in SPECIAL_TOKENS)
ANSWER_TOKEN_IDS = np.array([VOCAB[w] for w in ANSWER_WORDS], dtype=np.int64)

PATCH_SIZE = 12
IMAGE_TOKENS = (IMAGE_SIZE // PATCH_SIZE) ** 2  # 4
TOKENS_PER_SHOT = IMAGE_TOKENS + 3  # 4 image tokens, "->", answer, <eos>
IMAGE_MEAN = (0.5, 0.5, 0.5)
IMAGE_STD = (0.25, 0.25, 0.25)

CHAT_TEMPLATE = (
    "{#- dpmtv embedded model: <bos>, then per demonstration '<image>->answer<eos>', and the"
    " query '<image>->'. Question text is ignored; the answer is the next token after '->'. -#}"
    "{{ bos_token }}"
    "{%- for message in messages -%}"
    "{%- if message['role'] == 'user' -%}"
    "{%- if message['content'] is not string -%}"
    "{%- for item in message['content'] -%}"
    "{%- if item['type'] == 'image' -%}<image>{%- endif -%}"
    "{%- endfor -%}"
    "{%- endif -%}"
    "{%- elif message['role'] == 'assistant' -%}"
    "->"
    "{%- if message['content'] is string -%}{{ message['content'] | trim }}"
    "{%- else -%}{%- for item in message['content'] -%}"
    "{%- if item['type'] == 'text' -%}{{ item['text'] | trim }}{%- endif -%}"
    "{%- endfor -%}{%- endif -%}"
    "{{ eos_token }}"
    "{%- endif -%}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}->{%- endif -%}"
)


def build_tokenizer() -> PreTrainedTokenizerFast:
    """Word-level tokenizer over the special tokens and the answer words, built offline."""
    backend = Tokenizer(models.WordLevel(dict(VOCAB), unk_token=UNK))
    backend.pre_tokenizer = pre_tokenizers.Whitespace()  # splits "->red" into "->", "red"
    backend.add_special_tokens(
        [AddedToken(t, special=True, normalized=False) for t in (PAD, BOS, EOS, UNK, IMAGE)]
    )
    backend.add_tokens([AddedToken(ARROW, special=False, normalized=False)])
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=backend,
        bos_token=BOS,
        eos_token=EOS,
        pad_token=PAD,
        unk_token=UNK,
        extra_special_tokens={"image_token": IMAGE},
        model_max_length=4096,
    )
    tokenizer.padding_side = "left"
    assert len(tokenizer) == len(VOCAB), (len(tokenizer), len(VOCAB))
    return tokenizer


def build_image_processor() -> CLIPImageProcessorPil:
    """24 px in, 24 px out: any image is resized (bicubic) straight to 24x24, no center crop."""
    return CLIPImageProcessorPil(
        do_resize=True,
        size={"height": IMAGE_SIZE, "width": IMAGE_SIZE},
        do_center_crop=False,
        crop_size={"height": IMAGE_SIZE, "width": IMAGE_SIZE},
        do_rescale=True,
        do_normalize=True,
        image_mean=list(IMAGE_MEAN),
        image_std=list(IMAGE_STD),
        do_convert_rgb=True,
    )


def build_processor(tokenizer: PreTrainedTokenizerFast | None = None) -> LlavaProcessor:
    return LlavaProcessor(
        image_processor=build_image_processor(),
        tokenizer=tokenizer or build_tokenizer(),
        patch_size=PATCH_SIZE,
        vision_feature_select_strategy="default",
        num_additional_image_tokens=1,
        chat_template=CHAT_TEMPLATE,
        image_token=IMAGE,
    )


def build_config(
    max_position_embeddings: int = 1024, *, text_width: int = 128, text_layers: int = 4
) -> LlavaConfig:
    """The embedded model's configuration; ``text_width`` and ``text_layers`` size the language
    model (8 heads, width/8 each; the shipped model is 128 x 4)."""
    vision = CLIPVisionConfig(
        hidden_size=64,
        intermediate_size=256,
        num_hidden_layers=2,
        num_attention_heads=4,
        image_size=IMAGE_SIZE,
        patch_size=PATCH_SIZE,
        num_channels=3,
        projection_dim=64,
    )
    text = LlamaConfig(
        vocab_size=len(VOCAB),
        hidden_size=text_width,
        intermediate_size=4 * text_width,
        num_hidden_layers=text_layers,
        num_attention_heads=8,
        num_key_value_heads=8,
        head_dim=text_width // 8,
        max_position_embeddings=max_position_embeddings,
        rope_theta=10000.0,
        tie_word_embeddings=True,
        bos_token_id=BOS_ID,
        eos_token_id=EOS_ID,
        pad_token_id=PAD_ID,
    )
    return LlavaConfig(
        vision_config=vision,
        text_config=text,
        image_token_id=IMAGE_ID,
        image_seq_length=IMAGE_TOKENS,
        projector_hidden_act="gelu",
        vision_feature_layer=-1,
        vision_feature_select_strategy="default",
        tie_word_embeddings=True,
    )


def build_model(seed: int = 0, **size: int) -> LlavaForConditionalGeneration:
    """A randomly initialised embedded model (``size``: :func:`build_config`'s keywords)."""
    torch.manual_seed(seed)
    model = LlavaForConditionalGeneration(build_config(**size))
    gen = model.generation_config
    gen.bos_token_id, gen.eos_token_id, gen.pad_token_id = BOS_ID, EOS_ID, PAD_ID
    gen.do_sample = False
    return model


# --------------------------------------------------------------------------------------------
# the same format as ids and pixels, without strings (fast path for training and evaluation)
# --------------------------------------------------------------------------------------------
def pixels_from_uint8(images: np.ndarray) -> torch.Tensor:
    """uint8 ``(n, 24, 24, 3)`` -> float ``(n, 3, 24, 24)``, exactly as the image processor does
    for 24x24 inputs (rescale by 1/255, then normalise)."""
    x = torch.from_numpy(np.ascontiguousarray(images)).float().div_(255.0)
    mean = torch.tensor(IMAGE_MEAN).view(1, 1, 1, 3)
    std = torch.tensor(IMAGE_STD).view(1, 1, 1, 3)
    return ((x - mean) / std).permute(0, 3, 1, 2).contiguous()


def episode_ids(answer_token_ids: np.ndarray, *, query: bool = False) -> np.ndarray:
    """Token ids for episodes ``(E, K)`` of answer token ids: ``<bos>`` + K shots
    (4 image, ``->``, answer, ``<eos>``); with ``query=True`` one more ``<image>x4 ->`` at the end
    (the answers then cover the K demonstrations only)."""
    answer_token_ids = np.asarray(answer_token_ids, dtype=np.int64)
    e, k = answer_token_ids.shape
    shot = np.empty((e, k, TOKENS_PER_SHOT), dtype=np.int64)
    shot[:, :, :IMAGE_TOKENS] = IMAGE_ID
    shot[:, :, IMAGE_TOKENS] = ARROW_ID
    shot[:, :, IMAGE_TOKENS + 1] = answer_token_ids
    shot[:, :, IMAGE_TOKENS + 2] = EOS_ID
    parts = [np.full((e, 1), BOS_ID, dtype=np.int64), shot.reshape(e, -1)]
    if query:
        tail = np.full((e, IMAGE_TOKENS + 1), IMAGE_ID, dtype=np.int64)
        tail[:, -1] = ARROW_ID
        parts.append(tail)
    return np.concatenate(parts, axis=1)


def answer_positions(n_shots: int) -> np.ndarray:
    """Positions (in :func:`episode_ids` sequences) of the ``->`` tokens whose next-token logits
    predict each shot's answer."""
    return 1 + IMAGE_TOKENS + TOKENS_PER_SHOT * np.arange(n_shots)


def render_training_string(answers: Sequence[str], *, query: bool = True) -> str:
    """The prompt string before image expansion (what the chat template renders)."""
    text = BOS + "".join(f"{IMAGE}{ARROW}{a}{EOS}" for a in answers)
    return text + (f"{IMAGE}{ARROW}" if query else "")
