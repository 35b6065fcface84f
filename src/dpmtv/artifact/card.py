"""The model card written beside every artifact: ``task.safetensors`` → ``task.README.md``.

A Hugging Face model card (YAML front matter, then Markdown) saying what the vector is for, what
it guarantees in plain words and what it does not protect. It is rendered from the artifact's
metadata alone, and every metadata field is public by construction (docs/design.md §9), so the
card holds no value derived from the private records except through the noisy release:
``tests/artifact/test_card.py`` checks that cards of builds on datasets of different N are identical
apart from the creation time and the tensor hash.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dpmtv.heads import HeadSet

if TYPE_CHECKING:  # not imported at run time, since vector renders the card
    from dpmtv.artifact.metadata import ArtifactMetadata, PrivacyMetadata

CARD_SUFFIX = ".README.md"


def card_path(artifact: str | Path) -> Path:
    """``task.safetensors`` → ``task.README.md`` in the same folder."""
    artifact = Path(artifact)
    return artifact.with_name(artifact.stem + CARD_SUFFIX)


_MARKER = 'library_name: "dpmtv"'  # the first front-matter line of every card


def is_dpmtv_card(path: Path) -> bool:
    """Whether ``path`` is a card dpmtv wrote (its front matter starts with the marker)."""
    try:
        with open(path, encoding="utf-8") as file:
            return file.read(len(_MARKER) + 8).startswith(f"---\n{_MARKER}")
    except (OSError, UnicodeDecodeError):
        return False


def render_card(metadata: ArtifactMetadata, *, artifact_name: str) -> str:
    return "\n".join([_front_matter(metadata), *_body(metadata, artifact_name)]) + "\n"


def _front_matter(metadata: ArtifactMetadata) -> str:
    from dpmtv.artifact._claim_words import floating_point_safe  # the noise stack: not at `--help`

    p, model = metadata.privacy, metadata.model
    fields = {
        "library_name": "dpmtv",
        # a hub id only: the hub links base_model to a repository, and a local folder is none
        **({"base_model": model["hub_id"]} if model.get("hub_id") else {}),
        "tags": ["dpmtv", "task-vector", "differential-privacy", str(model.get("model_type"))],
        "dpmtv": {
            "format_version": metadata.format_version,
            "private": p.private,
            "epsilon": p.epsilon if p.private else None,
            "delta": p.delta if p.private else None,
            "neighbouring_relation": p.neighbouring_relation,
            "privacy_unit": p.privacy_unit,
            "noise_sampler": p.noise_sampler,
            "floating_point_safe": floating_point_safe(p),
        },
    }
    # JSON is YAML: every value is quoted or a number, so no name can break the front matter
    lines = [f"{key}: {json.dumps(value, ensure_ascii=False)}" for key, value in fields.items()]
    return "\n".join(["---", *lines, "---"])


def guarantee_in_words(p: PrivacyMetadata) -> str:
    """The guarantee, or its absence, in plain words."""
    from dpmtv.artifact._claim_words import floating_point_caveat

    if not p.private:
        if p.noise_std > 0:
            return (
                f"**No privacy guarantee.** The noise was seeded (seed {p.insecure_seed}), so anyone "
                "with the seed can regenerate it and recover the exact mean of the private data."
            )
        return "**No privacy guarantee** (non-private baseline, ε = ∞): no noise was added."
    unit = "one user's records" if p.privacy_unit == "user" else "one record"
    change = "replacing" if p.neighbouring_relation == "replace-one" else "adding or removing"
    return (
        f"**({p.epsilon:g}, {p.delta:g})-differential privacy per {p.privacy_unit}** "
        f"({p.neighbouring_relation}): {change} {unit} of the private data changes the probability "
        f"of any outcome of this vector by at most a factor e^{p.epsilon:g}, except with probability "
        f"{p.delta:g}. Every answer produced with it is post-processing and costs no further privacy. "
        f"Noise: Gaussian, σ = {p.noise_std:.6g}, drawn by the `{p.noise_sampler}` sampler "
        f"({'a secure source' if p.secure_noise else 'NOT a secure source'}"
        + (f"; {caveat}" if (caveat := floating_point_caveat(p, explain=True)) else "")
        + ")."
    )


def _body(metadata: ArtifactMetadata, artifact_name: str) -> list[str]:
    p, model, heads = metadata.privacy, metadata.model, metadata.heads
    base = model.get("hub_id") or model.get("name_or_path")
    origin = f"`{base}`" if model.get("hub_id") else f"the local checkpoint `{base}`"
    return [
        f"# dpmtv task vector for {origin}",
        "",
        f"`{artifact_name}` is a differentially private multimodal task vector (DP-MTV, arXiv "
        "2603.04894, on MTV): per-head activations patched into the model's attention heads so it "
        "answers as if it had seen many demonstrations. Apply it with `dpmtv answer --model "
        f"{base} --vector {artifact_name} ...` or `dpmtv serve`.",
        "",
        "## Guarantee",
        "",
        guarantee_in_words(p),
        "",
        *_model_section(model),
        "## Heads",
        "",
        f"{HeadSet.of(heads).in_words()}, chosen by "
        f"`{metadata.head_selection.get('method', 'unknown')}`: "
        + ", ".join(f"({layer}, {head})" for layer, head in heads),
        "",
        *_settings_section(metadata),
        *_protection_section(),
    ]


def _model_section(model: dict[str, Any]) -> list[str]:
    rows = [
        ("architecture", model.get("architecture")),
        ("model_type", model.get("model_type")),
        ("revision", model.get("revision")),
        (
            "geometry",
            f"{model.get('num_layers')} layers × {model.get('num_heads')} heads × {model.get('head_dim')}",
        ),
        ("quantization", model.get("quantization")),
        ("LoRA adapter", (model.get("lora_adapter") or {}).get("sha256")),
        ("config_sha256", model.get("config_sha256")),
        ("attention_weights_sha256", model.get("attention_weights_sha256")),
    ]
    return [
        "## Base model and fingerprint",
        "",
        "The vector is refused on any model whose fingerprint differs (config and attention weights).",
        "",
        "| field | value |",
        "|---|---|",
        *(f"| {key} | `{value}` |" for key, value in rows if value is not None),
        "",
    ]


def _settings_section(metadata: ArtifactMetadata) -> list[str]:
    p, prompt = metadata.privacy, metadata.prompt
    rows = [
        ("chunks m × shots per chunk s", f"{p.num_chunks} × {p.shots_per_chunk}"),
        (
            "records N",
            p.num_records if p.num_records is not None else "not stored (private under this relation)",
        ),
        ("L2 clip norm C per layer", ", ".join(f"{c:g}" for c in p.l2_clip_norm)),
        ("L2 sensitivity Δ", f"{p.l2_sensitivity:.6g}"),
        ("noise std σ (σ/Δ)", f"{p.noise_std:.6g} ({p.noise_multiplier:.4g})"),
        ("accountant", p.accountant),
        ("query / centering", f"{prompt.get('query')} / {prompt.get('center')}"),
        ("max prompt tokens", prompt.get("max_prompt_tokens")),
        ("workers", metadata.workers),
        ("library", f"dpmtv {metadata.library_version}, artifact format {metadata.format_version}"),
        ("created", metadata.created_at),
        ("tensors_sha256", metadata.tensors_sha256),
    ]
    return [
        "## Build settings",
        "",
        "| setting | value |",
        "|---|---|",
        *(f"| {key} | {value} |" for key, value in rows),
        "",
    ]


def _protection_section() -> list[str]:
    return [
        "## What is and is not protected",
        "",
        "Protected (when a guarantee is stated above): the private demonstrations the vector was "
        "built from, at the unit and relation stated. Nothing in this card or the artifact is derived "
        "from them except through the noisy release.",
        "",
        "Not protected: the base model itself; public data used without noise (public head-selection "
        "records, a centering reference, a public query image); the queries sent to a model using this "
        "vector and their answers; side channels of the machine that held the private data during "
        "the build. See docs/design.md §1 of dpmtv.",
    ]
