"""Signatures of task-vector artifacts, with OpenSSF model-signing and an elliptic-curve key
(docs/design.md §5, "Signatures").

A signature is a sidecar file next to the artifact, ``task.safetensors.sig``: the Sigstore bundle
that ``model_signing`` writes for a key-based signature (a DSSE envelope over an in-toto
statement, plus the SHA-256 of the signer's public key as a hint). Its manifest lists two files by
name and SHA-256: the artifact and its model card (``task.README.md``), since a reader trusts both.
The artifact is one file holding the tensors AND the metadata, so the signature covers those
together: no byte of either can change, and the metadata of one signed build laid over the tensors
of another is a file that neither signature covers. A card that is edited, missing or swapped is
refused the same way.

dpmtv 0.1.0 signed the artifact alone (a manifest of one file); such a signature is refused with
the line to re-sign it, rather than accepted as covering a card it never saw.

Keys: a PEM private key on the P-256, P-384 or P-521 curve, e.g.
``openssl ecparam -name prime256v1 -genkey -noout -out key.pem``, and its public half,
``openssl ec -in key.pem -pubout -out pub.pem``; model-signing's key signer takes no other kind
(RSA, Ed25519 and others are refused in one line). Signing and verifying need no network (no
Sigstore transparency log is involved for keys). Needs the ``sign`` extra
(``pip install -e '.[sign]'`` in the source checkout).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any, cast

from dpmtv._atomic import replacing
from dpmtv.artifact.card import card_path
from dpmtv.errors import ArtifactSignatureError, ParameterError

__all__ = [
    "SIGNATURE_NOT_VERIFIED",
    "SIGNATURE_SUFFIX",
    "Signer",
    "check_signing_key",
    "sign_files",
    "sign_task_vector",
    "signature_path",
    "signed_names",
    "signature_words",
    "signer_key_sha256",
    "verify_signature",
]

SIGNATURE_SUFFIX = ".sig"
SIGNATURE_NOT_VERIFIED = "signature not verified"  # what every reader says when no trusted key checked
_EXTRA = "signatures need the sign extra: pip install -e '.[sign]' in the dpmtv source checkout"
_EC_KEYS = "dpmtv signs with elliptic-curve keys on P-256, P-384 or P-521 only (model-signing's key signer)"
_NEW_KEY = "make one with `openssl ecparam -name prime256v1 -genkey -noout -out key.pem`"


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


def signed_names(artifact: str | Path) -> tuple[str, str]:
    """The names a signature of ``artifact`` lists: the artifact's and its card's."""
    return Path(artifact).name, card_path(artifact).name


def check_signing_key(private_key: str | Path, *, password: str | None = None) -> str:
    """Load ``private_key`` as a signer would, before any work that it must not follow (a build
    checks it before it charges a budget); return the SHA-256 of its public key.

    Raises:
        ParameterError: as :func:`sign_task_vector`, or the ``sign`` extra is missing.
    """
    from cryptography.hazmat.primitives import serialization

    key = _ec_private_key(Path(private_key), password)
    pem = key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    return hashlib.sha256(pem).hexdigest()


def sign_task_vector(artifact: str | Path, *, private_key: str | Path, password: str | None = None) -> Path:
    """Sign ``artifact`` and its card with the PEM EC ``private_key``; write the sidecar atomically
    and return it.

    Raises:
        ParameterError: the key is missing, unreadable, encrypted without ``password`` or not an
            EC key on a supported curve. ArtifactSignatureError: the artifact or its card is not a file.
    """
    artifact = Path(artifact)
    for path in (artifact, card_path(artifact)):
        if not path.is_file():
            raise ArtifactSignatureError(f"cannot sign '{artifact}': '{path}' is not a file")
    target = signature_path(artifact)
    named = dict(zip(signed_names(artifact), (artifact, card_path(artifact)), strict=True))
    with replacing(target) as temporary:
        sign_files(named, temporary, private_key=private_key, password=password)
    return target


def sign_files(
    files: Mapping[str, str | Path], signature: str | Path, *, private_key: str | Path, password: str | None
) -> None:
    """Write to ``signature`` a bundle over ``files`` (name in the manifest → where its bytes are
    now, e.g. a temporary that will be renamed to that name), signed by ``private_key``."""
    _ec_private_key(Path(private_key), password)  # the key's kind, in one line, before model-signing
    from model_signing._signing import sign_ec_key, signing

    manifest = _manifest({name: Path(path) for name, path in files.items()})
    secret = password.encode() if password else None
    # model-signing annotates the password `str`, but hands it to cryptography, which takes bytes
    bundle = sign_ec_key.Signer(Path(private_key), cast("str | None", secret)).sign(signing.Payload(manifest))
    bundle.write(Path(signature))


def verify_signature(artifact: str | Path, *, trusted_keys: Sequence[str | Path]) -> Signer:
    """Check that ``artifact``'s sidecar signature is valid, by one of ``trusted_keys`` (PEM public
    keys), over the artifact's and its card's current bytes.

    Raises:
        ArtifactSignatureError: no signature, an unreadable one, a signer that is none of the
            trusted keys, a card that is missing, or bytes of either file that changed since
            signing, or a signature of the artifact alone (re-sign it); names the file and the key.
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
        ArtifactSignatureError: the sidecar exists but is not a model-signing key bundle with one
            signature.
    """
    path = signature_path(artifact)
    if not path.is_file():
        return None
    try:
        bundle = json.loads(path.read_text(encoding="utf-8"))
        hint = bundle["verificationMaterial"]["publicKey"]["hint"]
        signatures = bundle["dsseEnvelope"]["signatures"]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ArtifactSignatureError(f"'{path}' is not a model-signing key signature: {exc!r}") from None
    if not isinstance(signatures, list) or len(signatures) != 1:
        count = len(signatures) if isinstance(signatures, list) else repr(signatures)
        raise ArtifactSignatureError(f"'{path}' holds {count} signatures, not one: it is not dpmtv's")
    if not isinstance(hint, str) or len(hint) != 64:
        raise ArtifactSignatureError(f"'{path}' records no signer key (hint {hint!r})")
    return hint


def signature_words(signer: Signer | None, artifact: str | Path) -> str:
    """What a reader checked of ``artifact``'s signature: who signed it when a trusted key verified
    it (``signer``), else that it is unsigned or that its signature was not verified. Without a
    trusted key a consistent forgery (every derived number rewritten) passes the artifact's own
    checks, so every reader says so rather than show the claim alone."""
    if signer is not None:
        return f"signed by {signer.describe()}, verified"
    try:
        recorded = signer_key_sha256(artifact)
    except ArtifactSignatureError:
        return f"unreadable signature file: {SIGNATURE_NOT_VERIFIED}"
    if recorded is None:
        return f"unsigned: {SIGNATURE_NOT_VERIFIED}, so anyone could have written this claim"
    return f"signed by key sha256:{recorded[:16]}… but {SIGNATURE_NOT_VERIFIED} (no trusted key was given)"


def _ec_private_key(key: Path, password: str | None) -> Any:
    """The PEM private key at ``key`` if it is one model-signing can sign with; else one line
    naming its kind."""
    _model_signing("signing")
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    try:
        loaded = serialization.load_pem_private_key(key.read_bytes(), password.encode() if password else None)
    except (OSError, ValueError, TypeError) as exc:
        raise ParameterError(f"signing key '{key}' is not a usable PEM private key: {exc}") from None
    if not isinstance(loaded, ec.EllipticCurvePrivateKey):
        kind = type(loaded).__name__.removeprefix("_").replace("PrivateKey", "") or "unknown"
        raise ParameterError(f"signing key '{key}' is an {kind} key; {_EC_KEYS}: {_NEW_KEY}")
    if loaded.curve.name not in ("secp256r1", "secp384r1", "secp521r1"):
        raise ParameterError(f"signing key '{key}' is on the {loaded.curve.name} curve; {_EC_KEYS}")
    return loaded


def _manifest(files: Mapping[str, Path]) -> Any:
    """model-signing's manifest of ``files`` (name → where the bytes are), SHA-256 per file, as
    its file serialization of a folder holding exactly them would record."""
    from model_signing import manifest

    serialization = manifest._FileSerialization("sha256")
    return manifest.Manifest(
        "dpmtv-task-vector",
        [serialization.new_item(name, _digest(path)) for name, path in files.items()],
        serialization,
    )


def _digest(path: Path) -> Any:
    from model_signing._hashing.hashing import Digest

    return Digest("sha256", _file_sha256(path))


def _file_sha256(path: Path) -> bytes:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.digest()


def _verify(artifact: Path, public_key: Path) -> None:
    signed = _signed_manifest(artifact, public_key)
    digests = {item.identifier: item.digest for item in signed.resource_descriptors()}
    if list(digests) == ["."]:  # model-signing's manifest of one file: dpmtv 0.1.0 signed the artifact alone
        raise ArtifactSignatureError(
            f"'{artifact}': its signature covers the artifact alone (dpmtv 0.1.0's format), not its card; "
            f"re-sign it: dpmtv sign {artifact} --key KEY.pem"
        )
    names = _artifact_and_card(list(digests))
    if names is None:
        raise ArtifactSignatureError(
            f"'{artifact}': the signature by {public_key} does not verify (it covers {sorted(digests)}, "
            "not an artifact and its card): the signature belongs to other files"
        )
    card = card_path(artifact)
    if not card.is_file():
        raise ArtifactSignatureError(
            f"'{artifact}': the signature by {public_key} does not verify: its card '{card}' is missing "
            "(the signature covers the artifact and its card together)"
        )
    # by role, not by name: a signed artifact renamed with its card and signature stays signed
    changed = [
        path.name
        for path, name in zip((artifact, card), names, strict=True)
        if _digest(path) != digests[name]
    ]
    if changed:
        raise ArtifactSignatureError(
            f"'{artifact}': the signature by {public_key} does not verify ({' and '.join(changed)} "
            "changed since signing): the tensors, the metadata or the card were changed after signing, "
            "or the signature belongs to another file"
        )


def _artifact_and_card(names: list[str]) -> tuple[str, str] | None:
    """The two names a dpmtv signature lists, as (artifact, its card); None for any other list."""
    if len(names) != 2:
        return None
    for artifact, card in (names, names[::-1]):
        if signed_names(artifact) == (artifact, card):
            return artifact, card
    return None


def _signed_manifest(artifact: Path, public_key: Path) -> Any:
    """The manifest the signature vouches for, once its signature by ``public_key`` is checked."""
    from cryptography.exceptions import InvalidSignature
    from model_signing._signing import sign_ec_key, sign_sigstore_pb

    try:
        verifier = sign_ec_key.Verifier(public_key)
        with contextlib.redirect_stdout(None):  # model-signing prints format warnings to stdout
            return verifier.verify(sign_sigstore_pb.Signature.read(signature_path(artifact)))
    except (ValueError, InvalidSignature, OSError, KeyError, TypeError, IndexError, AttributeError) as exc:
        raise ArtifactSignatureError(
            f"'{artifact}': the signature by {public_key} does not verify ({exc!r}); the tensors or "
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


def _model_signing(module: str) -> ModuleType:
    try:
        import importlib

        return importlib.import_module(f"model_signing.{module}")
    except ImportError as exc:
        raise ParameterError(f"{_EXTRA} ({exc})") from None
