"""What /v1/models and the page say about each served vector: its recorded guarantee, in
numbers and in plain words. Everything here is read from the artifact's public metadata."""

from __future__ import annotations

from typing import Any

from dpmtv.artifact._claim_words import floating_point_caveat, floating_point_safe, seeded_noise_words
from dpmtv.artifact.signature import SIGNATURE_NOT_VERIFIED
from dpmtv.serve._served import ServedModel, ServedVector

QUERIES_ARE_FREE = (
    "Answering questions with it spends no further privacy, however many are asked: each answer is "
    "post-processing of the released vector. This server never receives private records and keeps no "
    "privacy budget."
)

_RELATIONS = {
    "replace-one": "replacing",
    "add-remove-one": "adding or removing",
}


def guarantee(served: ServedVector) -> dict[str, Any]:
    """The numbers a client needs to judge the vector (all public metadata of the artifact)."""
    metadata = served.vector.metadata
    privacy = metadata.privacy
    return {
        "private": privacy.private,
        "epsilon": privacy.epsilon if privacy.private else None,
        "delta": privacy.delta if privacy.private else None,
        "epsilon_spent": privacy.epsilon_spent if privacy.private else None,
        "neighbouring_relation": privacy.neighbouring_relation,
        "privacy_unit": privacy.privacy_unit,
        "num_chunks": privacy.num_chunks,
        "shots_per_chunk": privacy.shots_per_chunk,
        "num_heads": len(metadata.heads),
        "heads": metadata.heads,
        "noise_std": privacy.noise_std,
        "secure_noise": privacy.secure_noise,
        "noise_sampler": privacy.noise_sampler,
        "floating_point_safe": floating_point_safe(privacy),
        "model_fingerprint": {
            key: metadata.model.get(key)
            for key in ("architecture", "model_type", "config_sha256", "attention_weights_sha256")
        },
        "signed_by_key_sha256": served.vector.signer.key_sha256 if served.vector.signer else None,
        "signature_verified": served.vector.signer is not None,
        "created_at": metadata.created_at,
        "library_version": metadata.library_version,
    }


def privacy_statement(served: ServedVector) -> str:
    """The guarantee in plain words, for people reading the page, then what the server checked of
    the vector's signature."""
    return f"{_claim_statement(served)} {signature_statement(served)}"


def signature_statement(served: ServedVector) -> str:
    """Who signed the vector, verified with a trusted key; else that nothing vouches for its claim."""
    signer = served.vector.signer
    if signer is not None:
        return f"Signed by key sha256:{signer.key_sha256[:16]}…, verified at start-up with a trusted key."
    return (
        f"Unsigned or {SIGNATURE_NOT_VERIFIED}: the server was started without a trusted key, so the "
        "numbers above are the file's own claim, which anyone could have written."
    )


def _claim_statement(served: ServedVector) -> str:
    privacy = served.vector.metadata.privacy
    if not privacy.private and privacy.noise_std > 0:
        return (
            f"NOT PRIVATE: this vector was {seeded_noise_words(privacy)}, and may reveal the records it "
            "was built from. " + QUERIES_ARE_FREE
        )
    if not privacy.private:
        return (
            "NOT PRIVATE: this vector was built without noise (ε = ∞) and may reveal the records it was "
            "built from. " + QUERIES_ARE_FREE
        )
    unit = privacy.privacy_unit
    action = _RELATIONS.get(privacy.neighbouring_relation, privacy.neighbouring_relation)
    statement = (
        f"Built from private records with ({privacy.epsilon:g}, {privacy.delta:g})-differential privacy "
        f"per {unit}: {action} any one {unit} changes the probability of any outcome of this vector by "
        f"at most a factor e^{privacy.epsilon:g} ≈ {_exp(privacy.epsilon)}, plus at most "
        f"{privacy.delta:g}. It averages {privacy.num_chunks} chunks of {privacy.shots_per_chunk} "
        f"records over {len(served.vector.metadata.heads)} attention heads. "
    )
    caveat = floating_point_caveat(privacy, explain=True)
    if caveat:
        statement += f"CAVEAT: {caveat}. "
    return statement + QUERIES_ARE_FREE


def zero_shot_statement() -> str:
    return "The bare model with no task vector: no private data is involved in its answers."


def model_cards(served: ServedModel) -> list[dict[str, Any]]:
    """``/v1/models`` entries: each vector with its guarantee, then the bare model."""
    cards = [
        _card(name, served.created, "task_vector", privacy_statement(vector), guarantee(vector))
        for name, vector in served.vectors.items()
    ]
    cards.append(_card(served.name, served.created, "zero_shot", zero_shot_statement(), None))
    return cards


def _card(
    name: str, created: int, kind: str, statement: str, numbers: dict[str, Any] | None
) -> dict[str, Any]:
    return {
        "id": name,
        "object": "model",
        "created": created,
        "owned_by": "dpmtv",
        "dpmtv": {"kind": kind, "privacy_statement": statement, "guarantee": numbers},
    }


def _exp(epsilon: float) -> str:
    import math

    return f"{math.exp(epsilon):.3g}" if epsilon < 700 else "∞"
