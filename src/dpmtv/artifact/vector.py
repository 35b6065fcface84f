"""The released task vector and its ``.safetensors`` artifact (docs/design.md §5).

Tensors: ``vector`` (K, d) float32 — the noisy per-head values, reference added back;
``heads`` (K, 2) int64 — (layer, head) pairs; optionally ``reference`` (K, d) — the public
centering reference. Metadata key ``dpmtv`` holds a versioned JSON document
(:class:`ArtifactMetadata`) that records the SHA-256 of the tensors; key ``dpmtv_sha256`` holds
the SHA-256 of that JSON text, so the metadata is hashed together with the tensors.

On load (:func:`load_task_vector`): the format version, both hashes, the heads, finite tensors,
and the privacy claim, every derivable number of which is re-derived (:mod:`dpmtv.artifact.claim`:
Δ from the clip norms, m and the relation; the counts the relation and unit make public; the
accounted events; σ from their calibration). The hashes detect edits by anyone who does not
recompute them; with ``trusted_keys`` the file must also carry a valid signature by one of them
(:mod:`dpmtv.artifact.signature`), which is what detects an edit by someone who does.

Format history: 1 — metadata not hashed, seeded vectors marked private (refused, explained);
2 — metadata hashed, claims checked on load, but Δ not re-derived (refused, explained);
3 — ``privacy.sensitivity_l2_clip_norm`` recorded, every derivable number re-derived on load.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from pydantic import ValidationError
from safetensors import SafetensorError
from safetensors.numpy import load_file, save_file

from dpmtv._atomic import replacing_together
from dpmtv.artifact.card import card_path, render_card
from dpmtv.artifact.metadata import FORMAT_VERSION, ArtifactMetadata, PrivacyMetadata
from dpmtv.artifact.signature import sign_files, signature_path, signed_names
from dpmtv.errors import ArtifactIntegrityError, ModelMismatchError
from dpmtv.heads import HeadSet
from dpmtv.models.fingerprint import IDENTITY_FIELDS_CHECKED

if TYPE_CHECKING:
    from dpmtv.artifact.signature import Signer

__all__ = [
    "FORMAT_VERSION",
    "ArtifactMetadata",
    "PrivacyMetadata",
    "TaskVector",
    "is_dpmtv_artifact",
    "load_task_vector",
    "save_task_vector",
    "tensors_sha256",
]

_HEADER_LIMIT_BYTES = 100_000_000  # safetensors' own limit on the JSON header
METADATA_KEY = "dpmtv"
METADATA_HASH_KEY = "dpmtv_sha256"  # SHA-256 of the METADATA_KEY text (which holds the tensor hash)


@dataclass(frozen=True)
class TaskVector:
    """Released per-head values for a head set, with the metadata that states their guarantee."""

    heads: HeadSet
    values: np.ndarray  # (K, d) float32
    metadata: ArtifactMetadata
    reference: np.ndarray | None = None  # (K, d), public
    signer: Signer | None = None  # set when loaded with trusted keys: who signed the file

    def rows_per_layer(self) -> dict[int, np.ndarray]:
        """The vector's rows by layer, in the head set's order: ``(heads in the layer, d)`` each.
        :func:`dpmtv.inference.vector_patches` turns them into the hooks' patches."""
        layers = [layer for layer, _ in self.heads.pairs]
        return {
            layer: self.values[[i for i, x in enumerate(layers) if x == layer]] for layer in self.heads.layers
        }

    def check_model(self, identity: dict[str, Any]) -> None:
        """Refuse a model whose identity differs from the one the vector was built for."""
        built_for = self.metadata.model
        for field in IDENTITY_FIELDS_CHECKED:
            if built_for.get(field) != identity.get(field):
                hint = (
                    " (a float16 load can change the rounded weights; load in float32 or bfloat16)"
                    if field == "attention_weights_sha256"
                    else ""
                )
                raise ModelMismatchError(
                    f"this task vector was built for model '{built_for.get('name_or_path')}', "
                    f"and field '{field}' differs: artifact {built_for.get(field)!r}, "
                    f"model {identity.get(field)!r}{hint}"
                )

    def _tensors(self) -> dict[str, np.ndarray]:
        tensors: dict[str, np.ndarray] = {
            "vector": np.ascontiguousarray(self.values, dtype=np.float32),
            "heads": np.asarray(self.heads.pairs, dtype=np.int64).reshape(-1, 2),
        }
        if self.reference is not None:
            tensors["reference"] = np.ascontiguousarray(self.reference, dtype=np.float32)
        return tensors


def tensors_sha256(tensors: dict[str, np.ndarray]) -> str:
    digest = hashlib.sha256()
    for name in sorted(tensors):
        array = np.ascontiguousarray(tensors[name])
        digest.update(f"{name}|{array.dtype.str}|{array.shape}|".encode())
        digest.update(array.tobytes())
    return digest.hexdigest()


def save_task_vector(vector: TaskVector, path: str | Path, *, sign_key: str | Path | None = None) -> Path:
    """Write the artifact, its model card beside it (:mod:`dpmtv.artifact.card`) and, with
    ``sign_key``, its signature over both (:mod:`dpmtv.artifact.signature`): all three are written
    to temporaries first and land together or not at all (:func:`dpmtv._atomic.replacing_together`).
    A signature left from an earlier file of that name is removed: it covers bytes no longer there."""
    path = Path(path)
    tensors = vector._tensors()
    metadata = vector.metadata.model_copy(update={"tensors_sha256": tensors_sha256(tensors)})
    targets = [path, card_path(path)] + ([signature_path(path)] if sign_key is not None else [])
    with replacing_together(targets) as temporaries:
        text = metadata.model_dump_json()
        try:
            save_file(
                tensors, temporaries[0], metadata={METADATA_KEY: text, METADATA_HASH_KEY: _sha256(text)}
            )
        except SafetensorError as exc:  # its I/O errors (a full disk) are OS errors to the caller
            raise OSError(f"cannot write '{path}': {exc}") from exc
        Path(temporaries[1]).write_text(render_card(metadata, artifact_name=path.name), encoding="utf-8")
        if sign_key is not None:
            named = dict(zip(signed_names(path), temporaries[:2], strict=True))
            sign_files(named, temporaries[2], private_key=sign_key, password=None)
    if sign_key is None:
        signature_path(path).unlink(missing_ok=True)
    return path


def is_dpmtv_artifact(path: Path) -> bool:
    """Whether ``path`` is a safetensors file with dpmtv's metadata (header only, no tensors)."""
    try:
        with open(path, "rb") as handle:
            header_size = int.from_bytes(handle.read(8), "little")
            if not 0 < header_size <= _HEADER_LIMIT_BYTES:
                return False
            header = json.loads(handle.read(header_size))
        return isinstance(header, dict) and METADATA_KEY in (header.get("__metadata__") or {})
    except (OSError, ValueError):
        return False


def load_task_vector(path: str | Path, *, trusted_keys: Sequence[str | Path] = ()) -> TaskVector:
    """Read an artifact and verify it: with ``trusted_keys`` (PEM public keys) first its signature
    by one of them over the file's bytes (:func:`dpmtv.artifact.signature.verify_signature`); then format,
    metadata and tensor hashes, heads, finite values, and the consistency of its privacy claim.

    Raises:
        ArtifactIntegrityError: names the file and the failing check or field
            (ArtifactSignatureError for the signature).
    """
    path = Path(path)
    if not path.is_file():
        raise ArtifactIntegrityError(f"task vector '{path}' does not exist")
    signer = None
    if trusted_keys:
        from dpmtv.artifact.signature import verify_signature

        signer = verify_signature(path, trusted_keys=trusted_keys)
    try:
        tensors = load_file(str(path))
        with open(path, "rb") as handle:
            header_size = int.from_bytes(handle.read(8), "little")
            stored = json.loads(handle.read(header_size))["__metadata__"]
        text = stored[METADATA_KEY]
        _check_format(path, json.loads(text))
        metadata = ArtifactMetadata.model_validate_json(text)
    except (SafetensorError, OSError, ValueError, KeyError, TypeError, ValidationError) as exc:
        raise ArtifactIntegrityError(f"'{path}' is not a readable dpmtv task vector: {exc}") from None
    if stored.get(METADATA_HASH_KEY) != _sha256(text):
        raise ArtifactIntegrityError(
            f"'{path}': its metadata has been modified: the text no longer matches its SHA-256"
        )
    actual = tensors_sha256(tensors)
    if actual != metadata.tensors_sha256:
        raise ArtifactIntegrityError(
            f"'{path}' has been modified: its tensors hash to {actual[:16]}…, but the metadata "
            f"records {metadata.tensors_sha256[:16]}…"
        )
    heads = HeadSet.of(map(tuple, tensors["heads"].tolist()))
    if heads.to_json() != metadata.heads:
        raise ArtifactIntegrityError(f"'{path}': the heads tensor disagrees with the metadata")
    for name in ("vector", "reference"):
        if name in tensors and not np.isfinite(tensors[name]).all():
            bad = int(np.size(tensors[name]) - np.isfinite(tensors[name]).sum())
            raise ArtifactIntegrityError(f"'{path}': tensor '{name}' is not finite ({bad} NaN/inf values)")
    # here, not at the top: the claim check needs dp-accounting (scipy, ~1 s of CPU to import),
    # which commands that load no artifact (`--help`) should not pay for
    from dpmtv.artifact.claim import check_privacy_claim

    check_privacy_claim(
        metadata.privacy, head_selection=metadata.head_selection, where=f"'{path}'", heads=metadata.heads
    )
    return TaskVector(heads, tensors["vector"], metadata, tensors.get("reference"), signer)


def _check_format(path: Path, document: dict[str, Any]) -> None:
    """Refuse another format version; explain what was wrong with format 1."""
    version = document.get("format_version")
    if version == FORMAT_VERSION:
        return
    if version == 1:
        claim = _claim_words(document)
        raise ArtifactIntegrityError(
            f"'{path}' has format 1 (dpmtv before format {FORMAT_VERSION}); its metadata is not covered "
            "by its hash, so an edited epsilon or sigma would go unnoticed, and format-1 vectors with "
            "seeded noise claimed (epsilon, delta)-DP although their seed regenerates the noise. Its "
            f"recorded claim ({claim}) cannot be verified: rebuild the vector with this dpmtv"
        )
    if version == 2:
        raise ArtifactIntegrityError(
            f"'{path}' has format 2 (dpmtv before format {FORMAT_VERSION}); its metadata is hashed, but "
            "its L2 sensitivity was not re-derived from its clip norms and chunk count on load, so a "
            "shrunken sensitivity (a smaller epsilon) or a relabelled neighbouring relation went "
            f"unnoticed. Its recorded claim ({_claim_words(document)}) cannot be verified: rebuild the "
            "vector with this dpmtv"
        )
    raise ArtifactIntegrityError(
        f"'{path}' has format_version {version!r}; this dpmtv reads {FORMAT_VERSION}"
    )


def _claim_words(document: dict[str, Any]) -> str:
    privacy = document.get("privacy", {})
    return ", ".join(
        f"{k} = {privacy.get(k)!r}" for k in ("private", "epsilon", "delta", "noise_sampler", "insecure_seed")
    )


def _sha256(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()
