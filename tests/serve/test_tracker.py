"""Log-probability entries name each token by its share of the text, with a SentencePiece-style
tokenizer (a word's space is part of its token: decoded alone, the first token of a text loses
it). The served test model's tokenizer is per-character, so this one is built here, offline."""

from __future__ import annotations

import threading

import pytest
import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast

from dpmtv.serve._decoding import Decoding, RowDecoding
from dpmtv.serve._tracker import RowTracker

WORDS = ["<unk>", "<s>", "</s>", "▁The", "▁capital", "▁is", "▁Paris", "▁Rome", "▁"]
EOS = 2


@pytest.fixture(scope="module")
def sentencepiece_tokenizer():
    model = Tokenizer(models.WordLevel({word: i for i, word in enumerate(WORDS)}, unk_token="<unk>"))
    model.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="first")
    model.decoder = decoders.Metaspace(replacement="▁", prepend_scheme="first")
    return PreTrainedTokenizerFast(
        tokenizer_object=model, unk_token="<unk>", bos_token="<s>", eos_token="</s>"
    )


def _generate(tokenizer, tokens: list[int], *, raw: bool) -> RowTracker:
    """The tracker after ``tokens`` were generated for one row asking for 2 alternatives."""
    decoding = RowDecoding([Decoding(logprobs=True, top_logprobs=2)], prompt_length=1)
    row = (len(tokens) + 1, threading.Event(), (), decoding.decodings[0], False, raw)
    tracker = RowTracker(tokenizer, [row], [EOS], decoding, None, None)
    generated = torch.tensor([[1]])
    for token in tokens:
        scores = torch.full((len(WORDS),), -10.0)
        scores[token], scores[WORDS.index("▁Rome")] = 0.0, -1.0
        decoding.latest[0] = torch.log_softmax(scores, dim=-1)
        generated = torch.cat([generated, torch.tensor([[token]])], dim=1)
        tracker(generated, scores[None])
    return tracker


@pytest.mark.parametrize("raw", [False, True], ids=["chat", "text completion"])
def test_entries_spell_the_answer_with_a_sentencepiece_tokenizer(sentencepiece_tokenizer, raw):
    tokens = sentencepiece_tokenizer("The capital is Paris", add_special_tokens=False)["input_ids"]
    assert len(tokens) == 4
    tracker = _generate(sentencepiece_tokenizer, tokens, raw=raw)
    entries = tracker.rows[0].logprobs
    spelled = "".join(entry.token for entry in entries)
    assert spelled == "The capital is Paris"  # each token alone decodes without its space
    assert tracker.text(0) == (spelled if raw else spelled.strip())
    # an alternative reads as it would in the text at that place
    assert [name for name, _ in entries[-1].top] == [" Paris", " Rome"]


def test_the_first_token_and_a_special_token_keep_their_names(sentencepiece_tokenizer):
    tracker = _generate(sentencepiece_tokenizer, [WORDS.index("▁The"), WORDS.index("<s>")], raw=True)
    assert [entry.token for entry in tracker.rows[0].logprobs] == ["The", ""]
    assert tracker.token_text(WORDS.index("▁Paris"), context=[WORDS.index("▁is")]) == " Paris"
