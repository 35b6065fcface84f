"""The artifact metadata of a build: every public number of the release, nothing private."""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

from dpmtv._version import __version__
from dpmtv.models.fingerprint import model_identity
from dpmtv.privacy import NeighbouringRelation, event_to_json
from dpmtv.prompt_budget import OVER_LENGTH_RULE
from dpmtv.vector import ArtifactMetadata, PrivacyMetadata

ACCOUNTANT_DESCRIPTION = (
    "dp_accounting PLDAccountant(ADD_OR_REMOVE_ONE) over unit-sensitivity events "
    "(noise_multiplier = noise_std / l2_sensitivity)"
)


def artifact_metadata(
    loaded, heads, settings, plan, clip_norms, partition, num_records, relation, head_selection
) -> ArtifactMetadata:
    replace_one = relation is NeighbouringRelation.REPLACE_ONE
    privacy = PrivacyMetadata(
        private=plan.private,
        epsilon=plan.epsilon,
        delta=plan.delta,
        epsilon_spent=plan.epsilon_spent,
        neighbouring_relation=relation.value,
        privacy_unit=settings.privacy_unit,
        l2_clip_norm=[clip_norms[layer] for layer in heads.layers],
        l2_sensitivity=plan.l2_sensitivity,
        noise_std=plan.noise_std,
        noise_std_analytic=plan.noise_std_analytic if plan.private else None,
        noise_std_sampler_map=plan.noise_std_sampler_map,
        noise_multiplier=plan.noise_multiplier,
        noise_sampler=plan.sampler,
        secure_noise=plan.sampler_secure,
        insecure_seed=settings.insecure_seed,
        num_chunks=partition.num_chunks,
        shots_per_chunk=settings.shots_per_chunk,
        num_records=num_records if replace_one else None,
        num_unused_records=partition.num_unused if replace_one else None,
        accountant=ACCOUNTANT_DESCRIPTION,
        accounting_events=event_to_json(plan.event),
    )
    return ArtifactMetadata(
        library_version=__version__,
        created_at=datetime.now(timezone.utc).isoformat(timespec="seconds"),
        model=model_identity(loaded.adapter, loaded.name_or_path),
        heads=heads.to_json(),
        head_selection=head_selection,
        prompt=prompt_metadata(settings),
        privacy=privacy,
    )


def prompt_metadata(settings) -> dict[str, Any]:
    return {
        "query": settings.query if settings.query in ("record", "blank") else "public-image",
        "query_question": settings.query_question if settings.query != "record" else None,
        "center": settings.center if settings.center in ("none", "blank") else "public-records",
        "format": "chat-template",
        "max_prompt_tokens": settings.max_prompt_tokens,  # public (resolved by the build)
        "over_length_rule": OVER_LENGTH_RULE,
        "private_forward": "one chunk per forward pass",
    }
