"""The generic adapter: finds the text decoder's layers and each layer's attention output
projection on the loaded model instead of reading them from a family file.

Discovery, in order (each step's failure is an :class:`~dpmtv.errors.AdapterError` naming it):

1. the decoder config: ``config.get_text_config(decoder=True)``; encoder–decoder generators are
   refused (their decoder reads the image through cross-attention to an encoder whose heads the
   method does not patch, and MTV is defined for decoder-only VLMs);
2. the decoder module: ``model.get_decoder()`` (transformers' own lookup), its path recovered from
   ``model.named_modules()`` so messages and metadata name it;
3. the layer list: the decoder's shallowest ``nn.ModuleList`` with ``num_hidden_layers`` entries;
4. per layer, the attention block (``self_attn``, ``attn``, ``attention``, ``self_attention``, or
   ``cross_attn`` for cross-attention layers) and its output projection (``o_proj``,
   ``out_proj``, ``c_proj``, ``dense``, ``wo``);
5. the geometry check shared with every adapter: the projection is an ``nn.Linear`` whose input
   width is ``num_attention_heads * head_dim`` (an explicit ``head_dim`` wins over
   ``hidden_size // num_attention_heads``), so its input splits into per-head outputs.
"""

from __future__ import annotations

from typing import Any

from torch import nn

from dpmtv.errors import AdapterError
from dpmtv.models.base import HeadGeometry, ModelAdapter

ATTENTION_NAMES = ("self_attn", "attn", "attention", "self_attention", "cross_attn")
PROJECTION_NAMES = ("o_proj", "out_proj", "c_proj", "dense", "wo")


def decoder_config(config: Any) -> Any:
    """The text decoder's config, refusing encoder–decoder generators."""
    if getattr(config, "is_encoder_decoder", False):
        raise AdapterError(
            f"model_type '{config.model_type}' is an encoder-decoder generator; dpmtv patches the "
            "attention heads of a decoder-only language model, so this architecture is not supported"
        )
    text = config.get_text_config(decoder=True)
    for key in ("num_attention_heads", "num_hidden_layers"):
        if not isinstance(getattr(text, key, None), int):
            raise AdapterError(
                f"model_type '{config.model_type}': the text config has no integer '{key}', so "
                "the decoder's head geometry cannot be read"
            )
    return text


def geometry_from_text_config(text: Any) -> HeadGeometry:
    """``num_hidden_layers`` layers of ``num_attention_heads`` heads; explicit ``head_dim`` wins."""
    num_heads = int(text.num_attention_heads)
    head_dim = getattr(text, "head_dim", None) or text.hidden_size // num_heads
    return HeadGeometry(int(text.num_hidden_layers), num_heads, int(head_dim))


def find_decoder_layers(model: nn.Module, num_layers: int, family: str) -> tuple[str, nn.ModuleList]:
    """Dotted path and module list of the text decoder's ``num_layers`` layers."""
    decoder = model.get_decoder() if hasattr(model, "get_decoder") else model
    names = {id(module): name for name, module in model.named_modules()}
    prefix = names.get(id(decoder), "")
    # The shallowest module list of the right length (Llama 4 nests it one level deeper, in a
    # causal-LM wrapper's ``model``).
    lists = [(n, m) for n, m in decoder.named_modules() if isinstance(m, nn.ModuleList) and n]
    sized = [(n, m) for n, m in lists if len(m) == num_layers]
    depth = min((n.count(".") for n, _ in sized), default=0)
    candidates = [(n, m) for n, m in sized if n.count(".") == depth]
    if len(candidates) != 1:
        found = [f"{n} ({len(m)})" for n, m in lists]
        raise AdapterError(
            f"{family}: cannot find the text decoder's layer list on {type(decoder).__name__} "
            f"(expected one module list of num_hidden_layers={num_layers} layers; found "
            f"{', '.join(found) or 'none'}); write an adapter spec (--model-spec) naming the path"
        )
    name, layers = candidates[0]
    return (f"{prefix}.{name}" if prefix else name), layers


def find_output_projection(layer: nn.Module, index: int, family: str) -> str:
    """Path, inside one decoder layer, of its attention block's output projection."""
    for attention_name in ATTENTION_NAMES:
        attention = getattr(layer, attention_name, None)
        if not isinstance(attention, nn.Module):
            continue
        for projection_name in PROJECTION_NAMES:
            if isinstance(getattr(attention, projection_name, None), nn.Linear):
                return f"{attention_name}.{projection_name}"
    children = ", ".join(name for name, _ in layer.named_children())
    raise AdapterError(
        f"{family}: decoder layer {index} ({type(layer).__name__}) has no attention block with a "
        f"linear output projection (looked for {'/'.join(ATTENTION_NAMES)} . "
        f"{'/'.join(PROJECTION_NAMES)}; its children are: {children}); the per-head outputs "
        "dpmtv reads do not exist in this architecture"
    )


# Families whose processor cannot interleave several images with text: one image per prompt.
SINGLE_IMAGE: dict[str, str] = {
    "fuyu": (
        "FuyuProcessor turns one image into patch tokens placed before the text; it has no image "
        "placeholder, so several images cannot be interleaved with the demonstrations' text"
    ),
    "got_ocr2": (
        "GotOcr2Processor places its images (the pages or crops of one document) together before "
        "the question, never interleaved with text"
    ),
}


# Families whose private chunks may share a fixed-shape forward pass (dpmtv.forward.fixed_shapes), and why
# a chunk's tensors then have public shapes: the image processor resizes every image to one size,
# so each image is one tensor of one shape and one fixed run of image tokens, whatever its content.
# Each is checked bitwise by tests/forward/test_fixed_shapes.py; a family not listed keeps one chunk per pass.
FIXED_SHAPE_FAMILIES: dict[str, str] = {
    "llava": "the CLIP processor resizes and centre-crops every image to one size",
    "gemma3": "the SigLIP processor resizes every image to one size (pan-and-scan off)",
    "paligemma": "the SigLIP processor resizes every image to one size",
}


class GenericAdapter(ModelAdapter):
    """Adapter for any decoder VLM whose sites :mod:`discovery <dpmtv.models.generic>` finds.

    Families that need something discovery cannot provide (an image-only processor, a prompt
    format) subclass it and override only that.
    """

    display_name = ""  # a family file's display name; else the model_type, set per instance
    model_types: tuple[str, ...] = ()
    special_reason = ""  # a family file's subclass says what discovery could not provide
    decoder_layers_path = ""  # filled per instance by discovery
    o_proj_path = ""

    def __init__(self, model: nn.Module, processor: Any):
        self.family = model.config.model_type
        self.display_name = type(self).display_name or self.family
        if self.family in SINGLE_IMAGE:
            self.max_images_per_prompt, self.single_image_reason = 1, SINGLE_IMAGE[self.family]
        self.fixed_shape_batches = type(self).fixed_shape_batches or self.family in FIXED_SHAPE_FAMILIES
        super().__init__(model, processor)

    @classmethod
    def text_config(cls, config: Any) -> Any:
        return decoder_config(config)

    @classmethod
    def head_geometry(cls, config: Any) -> HeadGeometry:
        return geometry_from_text_config(decoder_config(config))

    def _resolve_o_projs(self) -> list[nn.Module]:
        num_layers = self.geometry.num_layers
        self.decoder_layers_path, layers = find_decoder_layers(self.model, num_layers, self.display_name)
        self.o_proj_paths = [
            find_output_projection(layer, index, self.display_name) for index, layer in enumerate(layers)
        ]
        # The most common path; layers that differ (cross-attention) keep theirs in o_proj_paths.
        self.o_proj_path = max(set(self.o_proj_paths), key=self.o_proj_paths.count)
        o_projs = [layer.get_submodule(path) for layer, path in zip(layers, self.o_proj_paths)]
        check_projection_widths(o_projs, self.o_proj_paths, self.geometry, self.display_name)
        return o_projs


def check_projection_widths(
    o_projs: list[nn.Module], paths: list[str], geometry: HeadGeometry, family: str
) -> None:
    for index, (o_proj, path) in enumerate(zip(o_projs, paths)):
        width = getattr(o_proj, "in_features", None)
        if width != geometry.o_proj_in_features:
            raise AdapterError(
                f"{family}: layer {index} {path} takes {width} input features, expected "
                f"num_heads*head_dim = {geometry.num_heads}*{geometry.head_dim} = "
                f"{geometry.o_proj_in_features}; its input does not split into per-head outputs"
            )
