"""An offline character-level tokenizer with a family's special tokens.

Real chat templates use multi-character special tokens (``<|im_start|>``, ``<image>``...); these
are added as special tokens so they tokenize as one id, while any other text falls back to one
id per character. Good enough for random-weight models, and it needs no download.
"""

from __future__ import annotations

from collections.abc import Sequence

from tokenizers import Tokenizer, decoders, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast

_CHARS = [chr(code) for code in range(32, 127)] + ["\n", "\t"]


def char_tokenizer(
    *,
    special_tokens: Sequence[str],
    bos_token: str | None,
    eos_token: str,
    pad_token: str,
    unk_token: str = "<unk>",
    extra_special_tokens: dict[str, str] | None = None,
) -> PreTrainedTokenizerFast:
    specials = list(
        dict.fromkeys([unk_token, pad_token, eos_token, *([bos_token] if bos_token else []), *special_tokens])
    )
    vocab = {token: index for index, token in enumerate(specials + _CHARS)}
    backend = Tokenizer(models.WordLevel(vocab, unk_token=unk_token))
    backend.pre_tokenizer = pre_tokenizers.Split("", "isolated")
    backend.decoder = decoders.Fuse()  # characters decode without spaces between them
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=backend,
        bos_token=bos_token,
        eos_token=eos_token,
        pad_token=pad_token,
        unk_token=unk_token,
        extra_special_tokens=extra_special_tokens or {},
    )
    tokenizer.add_special_tokens({"additional_special_tokens": list(special_tokens)})
    return tokenizer
