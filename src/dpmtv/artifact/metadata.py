"""The artifact's metadata document: the pydantic models of its JSON (the build's public settings,
the model's identity and the guarantee). Apart from :mod:`dpmtv.artifact.vector` so that the card
and the claim's words can name these types without importing the file format that renders them."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict

FORMAT_VERSION = 3


class PrivacyMetadata(BaseModel):
    """How the vector was privatised. ``private`` is True only when the (ε, δ) guarantee holds:
    noised by a secure sampler. False for seeded noise (the seed regenerates it) and for the
    explicitly non-private baseline (``noise_std = 0``, ``epsilon = inf``)."""

    model_config = ConfigDict(extra="forbid", ser_json_inf_nan="constants")

    private: bool
    epsilon: float
    delta: float
    epsilon_spent: float
    neighbouring_relation: str
    privacy_unit: str = "record"
    l2_clip_norm: list[float]  # one per released layer, in layer order
    # The norms Δ = 2·sqrt(Σ C²)/m is computed over: l2_clip_norm, or with private selection the
    # worst case over the pool (dpmtv.privacy.sensitivity.worst_case_clip_norms).
    sensitivity_l2_clip_norm: list[float]
    l2_sensitivity: float
    noise_std: float
    noise_std_analytic: float | None
    noise_std_sampler_map: float | None
    noise_multiplier: float
    noise_sampler: str
    secure_noise: bool
    insecure_seed: int | None = None
    num_chunks: int
    shots_per_chunk: int
    num_records: int | None  # public only under replace-one
    num_unused_records: int | None
    accountant: str
    accounting_events: dict[str, Any]
    # --l2-clip-norm private: the settings, public layer scales, chosen multiplier and ε of the
    # clip's round (dpmtv.pipeline.private_clip.ClipChoice); None when C was given or public
    clip_norm_selection: dict[str, Any] | None = None


class ArtifactMetadata(BaseModel):
    """The artifact's JSON document: the build's public settings, the model's identity and the
    guarantee (:class:`PrivacyMetadata`); every field, and why it is public, is in docs/design.md."""

    model_config = ConfigDict(extra="forbid", ser_json_inf_nan="constants")

    format_version: int = FORMAT_VERSION
    library_version: str
    created_at: str
    model: dict[str, Any]
    heads: list[list[int]]
    head_selection: dict[str, Any]
    prompt: dict[str, Any]
    privacy: PrivacyMetadata
    workers: int = 1  # processes that extracted the chunks (1: local build; older artifacts: 1)
    tensors_sha256: str = ""
