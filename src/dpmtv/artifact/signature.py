"""Signatures of task-vector artifacts, with OpenSSF model-signing and an elliptic-curve key
(docs/design.md §5, "Signatures").

A signature is a sidecar file next to the artifact, ``task.safetensors.sig``: the Sigstore bundle
that ``model_signing`` writes for a key-based signature (a DSSE envelope over an in-toto
statement whose subject is the SHA-256 of the artifact file's bytes, plus the SHA-256 of the
signer's public key as a hint). The artifact is one file holding the tensors AND the metadata, so
the signature covers both together: no byte of either can change, and the metadata of one signed
build laid over the tensors of another is a file that neither signature covers.

Keys: a PEM private key on the P-256, P-384 or P-521 curve, e.g.
``openssl ecparam -name prime256v1 -genkey -noout -out key.pem``, and its public half,
``openssl ec -in key.pem -pubout -out pub.pem``. Signing and verifying need no network (no
Sigstore transparency log is involved for keys). Needs the ``sign`` extra
(``pip install -e '.[sign]'`` in the source checkout).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from dpmtv._atomic import replacing
from dpmtv.errors import ArtifactSignatureError, ParameterError

__all__ = [
    "SIGNATURE_SUFFIX",
    "Signer",
    "check_signing_key",
    "sign_task_vector",
    "signature_path",
    "signer_key_sha256",
    "verify_signature",
]

SIGNATURE_SUFFIX = ".sig"
_EXTRA = "signatures need the sign extra: pip install -e '.[sign]' in the dpmtv source checkout"


@dataclass(frozen=True)
class Signer:
    """Who signed a verified artifact: the SHA-256 of the signer's PEM public key (model-signing's
    key hint) and the trusted key file that verified it."""

    key_sha256: str
    trusted_key: Path

    def describe(self) -> str:
        return f"key sha256:{self.key_sha256[:16]}… ({self.trusted_key})"


def signature_path(artifact: str | Path) -> Path:
    """The sidecar signature of ``artifact``: its path with ``.sig`` appended."""
    artifact = Path(artifact)
    return artifact.with_name(artifact.name + SIGNATURE_SUFFIX)


def check_signing_key(private_key: str | Path, *, password: str | None = None) -> str:
    """Load ``private_key`` as a signer would, before any work that it must not follow (a build
    checks it before it charges a budget); return the SHA-256 of its public key.

    Raises:
        ParameterError: as :func:`sign_task_vector`, or the ``sign`` extra is missing.
    """
    _signing_config(Path(private_key), password)
    from cryptography.hazmat.primitives import serialization

    key = serialization.load_pem_private_key(Path(private_key).read_bytes(), password)
    pem = key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    return hashlib.sha256(pem).hexdigest()


def sign_task_vector(artifact: str | Path, *, private_key: str | Path, password: str | None = None) -> Path:
    """Sign ``artifact`` with the PEM EC ``private_key``; write the sidecar atomically and return it.

    Raises:
        ParameterError: the key is missing, unreadable, encrypted without ``password`` or not an
            EC key on a supported curve. ArtifactSignatureError: the artifact is not a file.
    """
    artifact, key = Path(artifact), Path(private_key)
    if not artifact.is_file():
        raise ArtifactSignatureError(f"cannot sign '{artifact}': it is not a file")
    config = _signing_config(key, password)
    target = signature_path(artifact)
    with replacing(target) as temporary:
        config.sign(artifact, temporary)
    return target


def verify_signature(artifact: str | Path, *, trusted_keys: Sequence[str | Path]) -> Signer:
    """Check that ``artifact``'s sidecar signature is valid, by one of ``trusted_keys`` (PEM public
    keys), over the artifact's current bytes.

    Raises:
        ArtifactSignatureError: no signature, an unreadable one, a signer that is none of the
            trusted keys, or bytes that changed since signing; names the file and the key.
        ParameterError: no trusted keys, or a trusted key that is not a PEM EC public key.
    """
    artifact = Path(artifact)
    if not trusted_keys:
        raise ParameterError("verify_signature needs at least one trusted key (--trusted-key PUB.pem)")
    _model_signing("verifying")  # without the extra: the pip line, not an ImportError
    hints = {_public_key_sha256(Path(key)): Path(key) for key in trusted_keys}
    signed_by = signer_key_sha256(artifact)
    if signed_by is None:
        raise ArtifactSignatureError(
            f"'{artifact}' is not signed: no signature file '{signature_path(artifact)}' (a trusted key "
            "was given, so only artifacts signed by it are accepted; sign with `dpmtv sign`)"
        )
    if signed_by not in hints:
        raise ArtifactSignatureError(
            f"'{artifact}' is signed by key sha256:{signed_by[:16]}…, which is none of the trusted keys "
            f"({', '.join(f'{p} = sha256:{h[:16]}…' for h, p in hints.items())})"
        )
    _verify(artifact, hints[signed_by])
    return Signer(signed_by, hints[signed_by])


def signer_key_sha256(artifact: str | Path) -> str | None:
    """The signer's key hint recorded in ``artifact``'s sidecar (NOT verified), or None if unsigned.

    Raises:
        ArtifactSignatureError: the sidecar exists but is not a model-signing key bundle.
    """
    path = signature_path(artifact)
    if not path.is_file():
        return None
    try:
        hint = json.loads(path.read_text(encoding="utf-8"))["verificationMaterial"]["publicKey"]["hint"]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ArtifactSignatureError(f"'{path}' is not a model-signing key signature: {exc!r}") from None
    if not isinstance(hint, str) or len(hint) != 64:
        raise ArtifactSignatureError(f"'{path}' records no signer key (hint {hint!r})")
    return hint


def _signing_config(key: Path, password: str | None):
    signing = _model_signing("signing")
    try:
        return signing.Config().use_elliptic_key_signer(private_key=key, password=password)
    except (OSError, ValueError, TypeError) as exc:
        raise ParameterError(f"signing key '{key}' is not a usable PEM EC private key: {exc}") from None


def _verify(artifact: Path, public_key: Path) -> None:
    from cryptography.exceptions import InvalidSignature

    verifying = _model_signing("verifying")
    config = verifying.Config().use_elliptic_key_verifier(public_key=public_key)
    try:
        with contextlib.redirect_stdout(None):  # model-signing prints format warnings to stdout
            config.verify(artifact, signature_path(artifact))
    except (ValueError, InvalidSignature, OSError, KeyError, TypeError) as exc:
        detail = "its bytes changed since signing" if "mismatch" in str(exc).lower() else repr(exc)
        raise ArtifactSignatureError(
            f"'{artifact}': the signature by {public_key} does not verify ({detail}); the tensors or "
            "the metadata were changed after signing, or the signature belongs to another file"
        ) from None


def _public_key_sha256(path: Path) -> str:
    """model-signing's key hint: SHA-256 of the SubjectPublicKeyInfo PEM of the key."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    try:
        key = serialization.load_pem_public_key(path.read_bytes())
    except (OSError, ValueError, TypeError) as exc:
        raise ParameterError(f"--trusted-key '{path}' is not a readable PEM public key: {exc}") from None
    if not isinstance(key, ec.EllipticCurvePublicKey):
        raise ParameterError(f"--trusted-key '{path}' is not an elliptic-curve public key")
    pem = key.public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    return hashlib.sha256(pem).hexdigest()


def _model_signing(module: str):
    try:
        import importlib

        return importlib.import_module(f"model_signing.{module}")
    except ImportError as exc:
        raise ParameterError(f"{_EXTRA} ({exc})") from None
