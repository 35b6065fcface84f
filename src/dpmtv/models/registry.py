"""Which adapter serves each ``config.model_type``, and why.

Every family is one of:

* ``generic`` — :class:`~dpmtv.models.generic.GenericAdapter` discovers the decoder layers and
  attention output projections on the loaded model and renders prompts with the checkpoint's own
  chat template; no family file.
* ``special-cased`` — a family file in :mod:`dpmtv.models.families` overrides what discovery
  cannot provide; its ``special_reason`` says what.
* ``refused`` — the method does not apply; loading raises
  :class:`~dpmtv.errors.UnsupportedModelError` with the reason.

A model type in none of these lists is attempted with the generic adapter (marked untested); if
discovery fails, the error names the step that failed.
"""

from __future__ import annotations

from dataclasses import dataclass

from dpmtv.errors import UnsupportedModelError
from dpmtv.models.base import ModelAdapter

_SPECIAL: dict[str, type[ModelAdapter]] = {}

# Families the contract suite runs on through the generic adapter (model_type -> display name).
GENERIC_FAMILIES: dict[str, str] = {
    "aya_vision": "Aya Vision",
    "deepseek_vl": "DeepSeek-VL",
    "gemma3": "Gemma 3",
    "glm46v": "GLM-4.6V",
    "glm4v_moe": "GLM-4.5V (GLM-4V-MoE)",
    "idefics2": "Idefics2",
    "idefics3": "Idefics3",
    "internvl": "InternVL",
    "llama4": "Llama 4",
    "llava": "LLaVA",
    "llava_next": "LLaVA-NeXT",
    "mistral3": "Mistral 3",
    "mllama": "Llama 3.2 Vision (Mllama)",
    "qianfan_ocr": "Qianfan-OCR",
    "qwen3_vl_moe": "Qwen3-VL-MoE",
    "vipllava": "VipLLaVA",
}

# Generic families whose stock processor cannot be built in dpmtv's test environment (it needs
# torchvision), so their tests run the processor-free adapter checks on the model only.
PROCESSOR_NEEDS_TORCHVISION: dict[str, str] = {
    "llama4": "Llama4ImageProcessor exists only for the torchvision backend",
    "mistral3": "PixtralProcessor imports the torchvision image-processor module",
}


# The model types of the family files (dpmtv.models.families), named here so that the status of
# a model type can be read without importing them (and transformers): `dpmtv inspect`.
SPECIAL_CASED_TYPES = frozenset(
    {
        "glm4v",
        "internvl",
        "llava_next_video",
        "llava_onevision",
        "paligemma",
        "qwen2_5_vl",
        "qwen2_vl",
        "qwen3_vl",
        "smolvlm",
        "video_llava",
    }
)

_ENCODER_DECODER = (
    "an encoder-decoder generator: the text decoder reads the image through cross-attention to an "
    "encoder, and the method patches a decoder-only language model's self-attention heads"
)
_HYBRID = (
    "a hybrid decoder: its gated-DeltaNet linear-attention layers (three in four) have no "
    "per-head outputs to read or patch"
)
REFUSED: dict[str, str] = {
    "florence2": _ENCODER_DECODER,
    "pix2struct": _ENCODER_DECODER,
    "t5gemma2": _ENCODER_DECODER,
    "udop": _ENCODER_DECODER,
    "vision-encoder-decoder": _ENCODER_DECODER,
    "diffusion_gemma": (
        "a block-diffusion generator: there is no autoregressive last token whose head outputs "
        "summarise the prompt"
    ),
    "evolla": "a protein-sequence + text model: its inputs are not images",
    "pi0": "a vision-language-action policy: it outputs robot actions, not text answers",
    "shieldgemma2": (
        "an image-safety classifier: its processor writes one fixed policy prompt per image and "
        "takes no question or answer text, so a many-shot prompt cannot be written"
    ),
    "qwen3_5": _HYBRID,
    "qwen3_5_moe": _HYBRID,
}


@dataclass(frozen=True)
class FamilyEntry:
    """One model type's status: ``generic``, ``special-cased``, ``refused`` or ``untested``."""

    model_type: str
    display_name: str
    status: str
    reason: str


def register(cls: type[ModelAdapter]) -> type[ModelAdapter]:
    """Class decorator for family files (special-cased families)."""
    for model_type in cls.model_types:
        _SPECIAL[model_type] = cls
    return cls


HOW_TO_ADD_AN_ADAPTER = (
    "To use another checkpoint: describe where its layers' attention output projections are, its "
    "head geometry and prompt format in a JSON adapter spec and pass --model-spec spec.json (examples "
    "in docs/adapters/; remote code also needs --trust-remote-code); or add a family file under "
    "src/dpmtv/models/families/ and check it with the adapter contract suite (subclass "
    "AdapterContract from tests/models/contract.py, as tests/models/test_llava.py does). See "
    "docs/design.md §11"
)


def adapter_for(model_type: str) -> type[ModelAdapter]:
    from dpmtv.models.generic import GenericAdapter

    _load_families()
    if model_type in REFUSED:
        raise UnsupportedModelError(
            f"model_type '{model_type}' is not supported: it is {REFUSED[model_type]}"
        )
    if (
        model_type not in _SPECIAL
        and model_type not in GENERIC_FAMILIES
        and not _image_text_to_text(model_type)
    ):
        raise UnsupportedModelError(
            f"no dpmtv adapter for model_type '{model_type}': transformers does not load it as an "
            f"image-text-to-text model; supported families: {', '.join(supported_families())}. "
            f"{HOW_TO_ADD_AN_ADAPTER}"
        )
    return _SPECIAL.get(model_type, GenericAdapter)


def _image_text_to_text(model_type: str) -> bool:
    from transformers.models.auto.modeling_auto import MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES

    return model_type in MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES


def family_entry(model_type: str) -> FamilyEntry:
    _load_families()
    if model_type in _SPECIAL:
        cls = _SPECIAL[model_type]
        return FamilyEntry(model_type, cls.display_name, "special-cased", cls.special_reason)
    if model_type in REFUSED:
        return FamilyEntry(model_type, model_type, "refused", REFUSED[model_type])
    if model_type in GENERIC_FAMILIES:
        reason = "layers, output projections and geometry discovered; the checkpoint's chat template"
        return FamilyEntry(model_type, GENERIC_FAMILIES[model_type], "generic", reason)
    return FamilyEntry(model_type, model_type, "untested", "generic discovery is attempted at load")


def is_contract_tested(model_type: str) -> bool:
    """Whether the contract suite covers ``model_type`` (or its refusal); reads no family file."""
    return model_type in SPECIAL_CASED_TYPES or model_type in GENERIC_FAMILIES or model_type in REFUSED


UNTESTED_WARNING = (
    "model_type '{model_type}' is not tested by dpmtv: generic discovery found its heads, but its "
    "processor and prompt format have not passed the adapter contract; check its answers before "
    "relying on them (README, 'Supported model families')"
)


def known_model_types() -> list[str]:
    """Every model type the registry has an opinion on."""
    _load_families()
    return sorted({*_SPECIAL, *GENERIC_FAMILIES, *REFUSED})


def supported_families() -> list[str]:
    """Display names and model types of the families the contract suite covers."""
    entries = [family_entry(t) for t in known_model_types()]
    return sorted(f"{e.display_name} ({e.model_type})" for e in entries if e.status != "refused")


def _load_families() -> None:
    # Importing the family modules registers them; done lazily to keep `import dpmtv` light.
    from dpmtv.models import families  # noqa: F401
