"""The caveats of a recorded claim, in words: the one wording that the build summary, ``inspect``,
``answer`` and ``serve`` (its ``/v1/models`` and page) all use, so none of them can state a
guarantee without its caveat."""

from __future__ import annotations

from typing import TYPE_CHECKING

from dpmtv.privacy.noise import CsprngNumpyGaussianSampler, OpenDPGaussianSampler, SeededGaussianSampler

if TYPE_CHECKING:
    from dpmtv.artifact.metadata import PrivacyMetadata

NOT_FLOATING_POINT_SAFE = "not floating-point safe"

_FLOATING_POINT_SAFE = {
    sampler.name: sampler.floating_point_safe
    for sampler in (OpenDPGaussianSampler, CsprngNumpyGaussianSampler, SeededGaussianSampler)
}


def floating_point_safe(privacy: PrivacyMetadata) -> bool:
    """Whether the recorded sampler draws its noise floating-point safely (OpenDP's exact discrete
    Gaussian); False for Box–Muller in float64 and for seeded noise, True without noise."""
    if privacy.noise_std == 0:
        return True
    return bool(_FLOATING_POINT_SAFE.get(privacy.noise_sampler, False))


def floating_point_caveat(privacy: PrivacyMetadata, *, explain: bool = False) -> str | None:
    """For a private claim whose noise is not floating-point safe, the caveat (``explain``: and
    what it means); else None."""
    if not privacy.private or floating_point_safe(privacy):
        return None
    caveat = f"{NOT_FLOATING_POINT_SAFE}: {privacy.noise_sampler} noise, Box–Muller in float64"
    if explain:
        caveat += (
            ", is Gaussian only up to floating-point rounding, whose gaps can reveal the un-noised "
            "value (Mironov, CCS 2012); the guarantee is proved for exact Gaussian noise"
        )
    return caveat


def seeded_noise_words(privacy: PrivacyMetadata) -> str:
    """A seeded vector: noised, but with a recorded seed that regenerates the noise."""
    return (
        f"noised with a recoverable seed: seed {privacy.insecure_seed} regenerates the noise, so the "
        "exact mean can be recovered"
    )
