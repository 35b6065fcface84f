"""The model-adapter contract: where a family's attention output projections live, its head
geometry, and how a :class:`~dpmtv.data.prompts.Prompt` becomes model inputs.

An adapter is mostly data (class attributes). Module paths are resolved and verified against the
loaded model when the adapter is attached, because transformers moves them between versions.
"""

from __future__ import annotations

import copy
import itertools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

if TYPE_CHECKING:  # annotations only: HeadGeometry (artifacts, head specs) must not load torch
    import torch
    from torch import nn

from dpmtv.data.prompts import Prompt, chat_messages
from dpmtv.errors import AdapterError
from dpmtv.models.chat_format import render_conversation


@dataclass(frozen=True)
class HeadGeometry:
    """Decoder geometry: ``num_layers`` layers of ``num_heads`` attention heads of ``head_dim``."""

    num_layers: int
    num_heads: int
    head_dim: int

    @property
    def o_proj_in_features(self) -> int:
        return self.num_heads * self.head_dim


class ModelAdapter:
    """Base adapter. Subclasses set the class attributes and override only what differs."""

    family: ClassVar[str]  # registry name, e.g. "llava"
    display_name: ClassVar[str]  # e.g. "LLaVA"
    model_types: ClassVar[tuple[str, ...]]  # config.model_type values served
    decoder_layers_path: ClassVar[str]  # dotted path from the top-level model
    o_proj_path: ClassVar[str] = "self_attn.o_proj"  # dotted path inside one decoder layer
    # Whether encoding needs only the processor, so prepare workers may run it (dpmtv.forward._prepare).
    prepares_in_workers: ClassVar[bool] = True
    # Whether private chunks may share a forward pass at fixed public shapes (dpmtv.forward.fixed_shapes):
    # a chunk's every input tensor must then take its shape from the public token budget and
    # image count alone. Off unless the family's bitwise test shows it (tests/forward/test_fixed_shapes.py).
    fixed_shape_batches: bool = False

    def __init__(self, model: nn.Module, processor: Any):
        self.model = model
        self.processor = processor
        self.geometry = self.head_geometry(model.config)
        self.o_projs: list[nn.Module] = self._resolve_o_projs()

    # ---- geometry -------------------------------------------------------------------------
    @classmethod
    def text_config(cls, config: Any) -> Any:
        return config.text_config

    @classmethod
    def head_geometry(cls, config: Any) -> HeadGeometry:
        """Head geometry from the text config; an explicit ``head_dim`` wins over hidden/heads."""
        text = cls.text_config(config)
        num_heads = int(text.num_attention_heads)
        head_dim = getattr(text, "head_dim", None) or text.hidden_size // num_heads
        return HeadGeometry(int(text.num_hidden_layers), num_heads, int(head_dim))

    @classmethod
    def load_processor(cls, path: str) -> Any:
        """The family's processor (``AutoProcessor``, or the stock class without its video
        processor, :mod:`dpmtv.models.processors`); families with other needs override."""
        from transformers import AutoConfig

        from dpmtv.models.processors import load_stock_or_image_only

        model_type = AutoConfig.from_pretrained(path).model_type
        processor = load_stock_or_image_only(path, model_type, cls.display_name or model_type)
        if not hasattr(processor, "tokenizer"):
            raise AdapterError(
                f"{cls.display_name or model_type}: AutoProcessor at '{path}' returned only "
                f"{type(processor).__name__}, not a multimodal processor"
            )
        return processor

    # ---- sites ----------------------------------------------------------------------------
    def _resolve_o_projs(self) -> list[nn.Module]:
        layers = _get_path(self.model, self.decoder_layers_path, self.display_name)
        if len(layers) != self.geometry.num_layers:
            raise AdapterError(
                f"{self.display_name}: {self.decoder_layers_path} has {len(layers)} layers, "
                f"but the config says num_hidden_layers={self.geometry.num_layers}"
            )
        o_projs = [_get_path(layer, self.o_proj_path, self.display_name) for layer in layers]
        for index, o_proj in enumerate(o_projs):
            width = getattr(o_proj, "in_features", None)
            if width != self.geometry.o_proj_in_features:
                raise AdapterError(
                    f"{self.display_name}: layer {index} {self.o_proj_path} takes {width} input "
                    f"features, expected num_heads*head_dim = {self.geometry.num_heads}*"
                    f"{self.geometry.head_dim} = {self.geometry.o_proj_in_features}"
                )
        return o_projs

    def without_model(self) -> ModelAdapter:
        """A copy that only renders and encodes, for a prepare worker: no model (the worker
        process never holds the weights), so its inputs stay on the CPU."""
        clone = copy.copy(self)
        clone.model, clone.o_projs = None, []
        return clone

    @property
    def input_device(self) -> torch.device:
        """Where the model takes its inputs: its input embeddings' device — with a device map, the
        device accelerate runs them on (their weights may be offloaded, i.e. on "meta"); the CPU
        for a copy :meth:`without_model`."""
        import torch

        model = self.model
        if model is None:
            return torch.device("cpu")
        try:
            embeddings = model.get_input_embeddings()
        except (AttributeError, NotImplementedError):  # remote code without the accessor
            embeddings = None
        hook = getattr(embeddings, "_hf_hook", None)
        if getattr(hook, "execution_device", None) is not None:
            return torch.device(hook.execution_device)
        # lazily: the first parameter not on "meta" decides (no list of every parameter per call)
        own = embeddings.parameters() if embeddings is not None else ()
        parameters = itertools.chain(own, model.parameters())
        return next((p.device for p in parameters if p.device.type != "meta"), torch.device("cpu"))

    # ---- prompts --------------------------------------------------------------------------
    @property
    def tokenizer(self) -> Any:
        return self.processor.tokenizer

    def render_text(self, prompt: Prompt) -> str:
        """The prompt as text in the family's format: the checkpoint's chat template, else the
        tokenizer's, else dpmtv's generic format (:mod:`dpmtv.models.chat_format`)."""
        return render_conversation(
            self.processor, chat_messages(prompt), add_generation_prompt=True, family=self.display_name
        )

    def render_with_answer(self, prompt: Prompt, answer: str) -> str:
        """The prompt followed by the assistant's ``answer`` (the conversation with its last turn
        filled in), in the same format as :meth:`render_text`."""
        messages = chat_messages(prompt)
        messages.append({"role": "assistant", "content": [{"type": "text", "text": answer}]})
        return render_conversation(
            self.processor, messages, add_generation_prompt=False, family=self.display_name
        )

    def processor_images(self, prompts: Sequence[Prompt]) -> list:
        """Images in the layout the family's processor expects (default: one list per prompt)."""
        return [prompt.all_images() for prompt in prompts]

    def encode(self, prompts: Sequence[Prompt], *, pad_to: int | None = None) -> dict[str, torch.Tensor]:
        """Left-padded batch of model inputs, so position -1 is every row's real last token:
        padded to the longest prompt, or with ``pad_to`` to that many tokens (a longer prompt
        keeps its length: the caller checks it)."""
        self._check_image_count(prompts)
        self.tokenizer.padding_side = "left"
        texts = [self.render_text(prompt) for prompt in prompts]
        padding: dict[str, Any] = (
            {"padding": True} if pad_to is None else {"padding": "max_length", "max_length": pad_to}
        )
        kwargs: dict[str, Any] = {"text": texts, "return_tensors": "pt", **padding}
        if any(prompt.all_images() for prompt in prompts):
            from dpmtv.models.processors import presized_images

            kwargs["images"] = presized_images(self.processor, self.processor_images(prompts))
        batch = self._run_processor(kwargs)
        device = self.input_device  # once: the property walks the parameters
        return {key: value.to(device) for key, value in batch.items()}

    def fixed_shape_prompt(self, prompt: Prompt) -> Prompt:
        """``prompt`` as a fixed-shape private pass encodes it. Default: as it is, for families
        whose processor already gives every image one shape and token count; families that
        size images by their content resize them to a public size here."""
        return prompt

    max_images_per_prompt: int | None = None  # families whose processor cannot interleave images
    single_image_reason = ""

    def _check_image_count(self, prompts: Sequence[Prompt]) -> None:
        limit = self.max_images_per_prompt
        most = max((len(prompt.all_images()) for prompt in prompts), default=0)
        if limit is not None and most > limit:
            raise AdapterError(
                f"{self.display_name}: a prompt with {most} images is refused: this family takes "
                f"at most {limit} image per prompt ({self.single_image_reason}); a many-shot prompt "
                "interleaves one image per demonstration"
            )

    def _run_processor(self, kwargs: dict[str, Any]) -> Any:
        from dpmtv.models.processors import PROCESSOR_ERRORS, processor_error

        # a prepare worker's copy of the adapter has no model: name the family by display name then
        family = getattr(getattr(self.model, "config", None), "model_type", self.display_name)
        try:
            return self.processor(**kwargs)
        except PROCESSOR_ERRORS as exc:
            what = f"{type(self.processor).__name__} could not encode a prompt"
            raise processor_error(self.display_name, family, what, exc) from exc

    @property
    def eos_token_ids(self) -> list[int]:
        ids = self.model.generation_config.eos_token_id
        if ids is None:
            ids = self.tokenizer.eos_token_id
        return [ids] if isinstance(ids, int) else list(ids or [])


def _get_path(root: nn.Module, dotted: str, family: str) -> Any:
    obj: Any = root
    for part in dotted.split("."):
        try:
            obj = obj[int(part)] if part.isdigit() else getattr(obj, part)
        except (AttributeError, IndexError) as exc:
            raise AdapterError(
                f"{family}: module path '{dotted}' does not resolve on "
                f"{type(root).__name__} (stopped at '{part}'); this transformers version may "
                "have moved it — update the adapter's path"
            ) from exc
    return obj
