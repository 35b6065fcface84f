"""How a conversation becomes prompt text when the processor has no chat template.

In order (docs/design.md §11):

1. the processor's chat template (the checkpoint's ``chat_template.jinja`` and the like);
2. the tokenizer's chat template — some processors (Fuyu, Chameleon) do not keep the template
   the checkpoint ships in its tokenizer config; message contents are flattened to text, each
   image written as the processor's image token (which the processor then expands);
3. the generic format: one line per turn, ``User: `` or ``Assistant: `` and the turn's content,
   images as the processor's image token (nothing where the processor places images itself), and
   ``Assistant:`` as the generation prompt. It is not the format the checkpoint was trained on,
   so answers may be worse than with the family's own template; a warning says so.
"""

from __future__ import annotations

import warnings
from typing import Any

GENERIC_ROLE_NAMES = {"user": "User", "assistant": "Assistant", "system": "System"}


def render_conversation(
    processor: Any, messages: list[dict], *, add_generation_prompt: bool, family: str
) -> str:
    if getattr(processor, "chat_template", None):
        return processor.apply_chat_template(
            messages, add_generation_prompt=add_generation_prompt, tokenize=False
        )
    tokenizer = getattr(processor, "tokenizer", processor)
    image_token = getattr(processor, "image_token", None) or ""
    flat = [{"role": m["role"], "content": _flatten(m["content"], image_token)} for m in messages]
    if getattr(tokenizer, "chat_template", None):
        return tokenizer.apply_chat_template(
            flat, add_generation_prompt=add_generation_prompt, tokenize=False
        )
    warnings.warn(
        f"{family}: neither the processor nor the tokenizer has a chat template; using dpmtv's "
        "generic 'User: ... / Assistant: ...' format (add the checkpoint's chat_template.jinja "
        "for its own format)",
        stacklevel=2,
    )
    return generic_format(flat, add_generation_prompt=add_generation_prompt)


def generic_format(messages: list[dict], *, add_generation_prompt: bool) -> str:
    lines = [f"{GENERIC_ROLE_NAMES.get(m['role'], m['role'].title())}: {m['content']}" for m in messages]
    if add_generation_prompt:
        lines.append("Assistant:")
    return "\n".join(lines)


def _flatten(content: Any, image_token: str) -> str:
    if isinstance(content, str):
        return content
    parts = [image_token if item["type"] == "image" else item.get("text", "") for item in content]
    return "".join(part for part in parts if part)
