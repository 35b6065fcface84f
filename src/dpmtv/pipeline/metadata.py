"""The artifact metadata of a build: every public number of the release, nothing private."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, cast

from dpmtv._build_time import build_timestamp
from dpmtv._version import __version__
from dpmtv.artifact.vector import ArtifactMetadata, PrivacyMetadata
from dpmtv.forward.failed_chunks import FAILED_CHUNK_RULE
from dpmtv.forward.fixed_shapes import describe_private_forward
from dpmtv.forward.prompt_budget import OVER_LENGTH_RULE
from dpmtv.heads import HeadSet
from dpmtv.models.fingerprint import model_identity
from dpmtv.pipeline.plan import BuildLayout
from dpmtv.pipeline.settings import BuildSettings, QueryKind
from dpmtv.privacy import event_to_json
from dpmtv.privacy.release import GaussianReleasePlan

if TYPE_CHECKING:  # the model's identity is read from it; torch loads with the model
    from dpmtv.models.loading import LoadedModel

ACCOUNTANT_DESCRIPTION = (
    "dp-accounting's PLD accountant (pessimistic) over unit-sensitivity events: a Gaussian of "
    "noise_multiplier = noise_std / l2_sensitivity, where l2_sensitivity is already the "
    "sensitivity under this artifact's neighbouring_relation and privacy_unit, so each event "
    "compares N(0, noise_multiplier^2) with N(1, noise_multiplier^2)"
)


def artifact_metadata(
    loaded: LoadedModel,
    heads: HeadSet,
    settings: BuildSettings,
    plan: GaussianReleasePlan,
    layout: BuildLayout,
    head_selection: dict[str, Any],
    *,
    workers: int = 1,
    created_at: str | None = None,
    clip_norm_selection: dict[str, Any] | None = None,
) -> ArtifactMetadata:
    """``layout``: the build's clip norms and the norms Δ rests on, the release's chunks (a half
    with parallel selection) and the build's whole partition, whose counts are stored only where
    they are public (replace-one).
    Every field, and why it is public: ``docs/design.md``, "Artifact metadata". ``created_at``:
    the build's one time (:mod:`dpmtv._build_time`, taken before the records were read); default
    now, for experiments that write nothing. ``clip_norm_selection``: a private clip norm's
    public settings, scales and chosen multiplier (:class:`dpmtv.pipeline.private_clip.ClipChoice`)."""
    chunked, partition, clip_norms = layout.chunked, layout.release_part, layout.l2_clip_norms
    relation = chunked.relation
    replace_one = chunked.counts_are_public
    privacy = PrivacyMetadata(
        private=plan.private,
        epsilon=plan.epsilon,
        delta=plan.delta,
        epsilon_spent=plan.epsilon_spent,
        neighbouring_relation=relation.value,
        privacy_unit=settings.privacy_unit.value,
        l2_clip_norm=[clip_norms[layer] for layer in heads.layers],
        sensitivity_l2_clip_norm=list(layout.sensitivity_clip_norms),
        l2_sensitivity=cast(float, plan.l2_sensitivity),  # every released plan records its Δ
        noise_std=plan.noise_std,
        noise_std_analytic=plan.noise_std_analytic if plan.noised else None,
        noise_std_sampler_map=plan.noise_std_sampler_map,
        noise_multiplier=plan.noise_multiplier,
        noise_sampler=plan.sampler,
        secure_noise=plan.sampler_secure,
        insecure_seed=settings.insecure_seed,
        num_chunks=partition.num_chunks,
        shots_per_chunk=settings.shots_per_chunk,
        num_records=chunked.num_records if replace_one else None,
        num_unused_records=partition.num_unused if replace_one else None,
        accountant=ACCOUNTANT_DESCRIPTION,
        accounting_events=event_to_json(plan.event),
        clip_norm_selection=clip_norm_selection,
    )
    return ArtifactMetadata(
        library_version=__version__,
        created_at=created_at or build_timestamp(),
        model=model_identity(loaded.adapter, loaded.name_or_path),
        heads=heads.to_json(),
        head_selection=head_selection,
        prompt=prompt_metadata(settings),
        privacy=privacy,
        workers=workers,
    )


def prompt_metadata(settings: BuildSettings) -> dict[str, Any]:
    """The prompt's public kinds; public file paths are not stored (they may name people)."""
    rows = settings.private_batch_size or 1  # resolved by the build
    return {
        "query": settings.query.value,
        "query_question": settings.query_question if settings.query is not QueryKind.RECORD else None,
        "center": settings.center.value,
        "format": "chat-template",
        "max_prompt_tokens": settings.max_prompt_tokens,  # public (resolved by the build)
        "over_length_rule": OVER_LENGTH_RULE,
        # public: the family, --private-batch-size and the budget (dpmtv.pipeline.private_batching)
        "private_forward": describe_private_forward(rows, settings.max_prompt_tokens or 0),
        "private_batch_size": rows,
        "failed_chunk_rule": FAILED_CHUNK_RULE,
    }
