"""Is a loaded artifact's privacy claim consistent? Every number the claim rests on is checked
against the others and against the calibration, so an edited or corrupt claim is refused.

This is a consistency check, not a signature: whoever edits ε AND recomputes σ, the hashes and
the noise can forge any claim. What it catches is every claim that does not follow from its own
numbers (ε = 0.1 next to the σ of ε = 1, σ = 0, ε < 0, δ >= 1, NaN, a seeded vector marked
private), which is what an edit by hand or a corrupt file produces.
"""

from __future__ import annotations

import math

import dp_accounting

from dpmtv.errors import ArtifactIntegrityError, DpmtvError
from dpmtv.privacy.events import event_from_json
from dpmtv.privacy.noise import CsprngNumpyGaussianSampler, OpenDPGaussianSampler, SeededGaussianSampler
from dpmtv.privacy.release import NON_PRIVATE_SAMPLER, calibrated_noise_std

# The calibration searches to 1e-7 relative; a recorded σ further than this from it was edited.
NOISE_STD_RELATIVE_TOLERANCE = 1e-6


def check_privacy_claim(privacy, *, where: str) -> None:
    """Raise ArtifactIntegrityError naming the first field of ``privacy`` (a
    :class:`dpmtv.vector.PrivacyMetadata`) that contradicts the others."""
    claim = _Claim(privacy, where)
    claim.no_nan()
    if privacy.noise_std == 0:
        claim.without_noise()
    else:
        claim.noised()


class _Claim:
    def __init__(self, privacy, where: str):
        self.p, self.where = privacy, where

    def refuse(self, field: str, why: str) -> None:
        raise ArtifactIntegrityError(
            f"{self.where}: privacy.{field} = {getattr(self.p, field)!r} {why}; the metadata has been "
            "edited or is corrupt, so its guarantee cannot be trusted (rebuild the vector)"
        )

    def no_nan(self) -> None:
        for field in ("epsilon", "delta", "epsilon_spent", "l2_sensitivity", "noise_std", "noise_multiplier"):
            value = getattr(self.p, field)
            if math.isnan(value) or value < 0:
                self.refuse(field, "is NaN or negative")
        if not all(math.isfinite(c) and c > 0 for c in self.p.l2_clip_norm):
            self.refuse("l2_clip_norm", "holds a norm that is not finite and > 0")

    def without_noise(self) -> None:
        p = self.p
        if p.private:
            self.refuse("noise_std", "(no noise) next to privacy.private = True")
        if not math.isinf(p.epsilon) or p.noise_sampler != NON_PRIVATE_SAMPLER:
            self.refuse("epsilon", "is claimed for a release without noise (it must be inf, sampler 'none')")

    def noised(self) -> None:
        p = self.p
        if not (math.isfinite(p.epsilon) and p.epsilon > 0):
            self.refuse("epsilon", "must be finite and > 0")
        if not 0.0 < p.delta < 1.0:
            self.refuse("delta", "must be in (0, 1)")
        for field in ("l2_sensitivity", "noise_std"):
            if not math.isfinite(getattr(p, field)) or getattr(p, field) <= 0:
                self.refuse(field, "must be finite and > 0")
        sampler = self.sampler()
        if p.private != bool(sampler.secure) or p.secure_noise != bool(sampler.secure):
            secure = "secure" if sampler.secure else "seeded, NOT secure"
            self.refuse("private", f"(secure_noise = {p.secure_noise!r}) but sampler {sampler!r} is {secure}")
        self.calibrated(sampler, self.fixed_events())
        if p.epsilon_spent > p.epsilon:
            self.refuse("epsilon_spent", f"exceeds privacy.epsilon = {p.epsilon!r}")

    def sampler(self):
        p = self.p
        if p.noise_sampler == "seeded-numpy":
            if p.insecure_seed is None:
                self.refuse("insecure_seed", "is missing for seeded noise")
            return SeededGaussianSampler(p.insecure_seed)
        if p.insecure_seed is not None:
            self.refuse("insecure_seed", f"is recorded for the unseeded sampler {p.noise_sampler!r}")
        samplers = {"opendp": OpenDPGaussianSampler, "csprng-numpy": CsprngNumpyGaussianSampler}
        if p.noise_sampler not in samplers:
            self.refuse("noise_sampler", f"is not one of {sorted(samplers)} or 'seeded-numpy'")
        return samplers[p.noise_sampler]()

    def fixed_events(self) -> list[dp_accounting.DpEvent]:
        """The accounted event is the Gaussian release, alone or last in a composition."""
        try:
            event = event_from_json(self.p.accounting_events)
        except DpmtvError as exc:
            self.refuse("accounting_events", f"is not a dpmtv event ({exc})")
        events = list(event.events) if isinstance(event, dp_accounting.ComposedDpEvent) else [event]
        release = events[-1]
        if not isinstance(release, dp_accounting.GaussianDpEvent) or not math.isclose(
            release.noise_multiplier, self.p.noise_multiplier, rel_tol=1e-12
        ):
            self.refuse("accounting_events", "does not end with the Gaussian of privacy.noise_multiplier")
        return events[:-1]

    def calibrated(self, sampler, fixed: list[dp_accounting.DpEvent]) -> None:
        p = self.p
        numbers = (
            f"privacy.l2_sensitivity = {p.l2_sensitivity!r}, privacy.epsilon = {p.epsilon!r}, "
            f"privacy.delta = {p.delta!r}, privacy.noise_sampler = {p.noise_sampler!r}"
        )
        try:
            expected = calibrated_noise_std(
                l2_sensitivity=p.l2_sensitivity,
                epsilon=p.epsilon,
                delta=p.delta,
                sampler=sampler,
                fixed_events=fixed,
            )
        except DpmtvError as exc:
            self.refuse("epsilon", f"cannot be calibrated with {numbers} ({exc})")
        if not math.isclose(p.noise_std, expected, rel_tol=NOISE_STD_RELATIVE_TOLERANCE):
            self.refuse("noise_std", f"is not the calibration {expected!r} for {numbers}")
        if not math.isclose(p.noise_multiplier * p.l2_sensitivity, p.noise_std, rel_tol=1e-9):
            self.refuse("noise_multiplier", "is not privacy.noise_std / privacy.l2_sensitivity")
