"""Pure privacy maths of dpmtv: partition, clip, aggregate, sensitivity, calibration, noise,
accounting events and the one noisy release.

Imports only numpy, scipy (via dp-accounting), dp-accounting, opendp and the standard library;
no model code. The data flow of a release::

    partition_private_records -> (model, elsewhere) -> clip_l2_per_layer -> ClippedSumAccumulator.add
    l2_sensitivity -> plan_gaussian_release
    release_clipped_sum(sums, num_chunks=m, plan) = .mean(num_chunks=m) -> add_gaussian_noise -> NoisedVector
    (release_clipped_mean(rows, ...) clips in-memory rows and does the same)
"""

from dpmtv.privacy.aggregate import ClippedSumAccumulator, UnnoisedMean
from dpmtv.privacy.calibrate import (
    analytic_gaussian_noise_multiplier,
    calibrate_gaussian_noise_multiplier,
    validate_epsilon_delta,
)
from dpmtv.privacy.clip import clip_l2_per_layer, parse_l2_clip_norms
from dpmtv.privacy.events import (
    VALUE_DISCRETIZATION_INTERVAL,
    delta_of,
    epsilon_of,
    event_from_json,
    event_to_json,
    gaussian_release_event,
    make_accountant,
)
from dpmtv.privacy.noise import (
    CsprngNumpyGaussianSampler,
    NoiseSampler,
    OpenDPGaussianSampler,
    SeededGaussianSampler,
    draw_gaussian_noise,
    make_sampler,
    opendp_noise_std,
    perturb_with_gaussian,
)
from dpmtv.privacy.partition import (
    Partition,
    fresh_partition_key,
    partition_add_remove_one,
    partition_replace_one,
    secure_rng,
    seeded_rng,
)
from dpmtv.privacy.relation import AdjacencyRelation, parse_relation
from dpmtv.privacy.release import (
    GaussianReleasePlan,
    NoisedVector,
    add_gaussian_noise,
    plan_gaussian_release,
    release_clipped_mean,
    release_clipped_sum,
    release_without_noise,
)
from dpmtv.privacy.sensitivity import l2_sensitivity
from dpmtv.privacy.units import (
    PartitionRandomness,
    PrivacyUnit,
    PrivatePartition,
    derive_insecure_seed,
    parse_privacy_unit,
    partition_private_records,
    partition_randomness,
)

__all__ = [
    "VALUE_DISCRETIZATION_INTERVAL",
    "ClippedSumAccumulator",
    "CsprngNumpyGaussianSampler",
    "GaussianReleasePlan",
    "AdjacencyRelation",
    "NoiseSampler",
    "NoisedVector",
    "OpenDPGaussianSampler",
    "Partition",
    "PartitionRandomness",
    "PrivacyUnit",
    "PrivatePartition",
    "SeededGaussianSampler",
    "UnnoisedMean",
    "add_gaussian_noise",
    "analytic_gaussian_noise_multiplier",
    "calibrate_gaussian_noise_multiplier",
    "clip_l2_per_layer",
    "delta_of",
    "derive_insecure_seed",
    "draw_gaussian_noise",
    "perturb_with_gaussian",
    "epsilon_of",
    "event_from_json",
    "event_to_json",
    "fresh_partition_key",
    "gaussian_release_event",
    "l2_sensitivity",
    "make_accountant",
    "make_sampler",
    "opendp_noise_std",
    "parse_l2_clip_norms",
    "parse_privacy_unit",
    "parse_relation",
    "partition_add_remove_one",
    "partition_private_records",
    "partition_randomness",
    "partition_replace_one",
    "plan_gaussian_release",
    "release_clipped_mean",
    "release_clipped_sum",
    "release_without_noise",
    "secure_rng",
    "seeded_rng",
    "validate_epsilon_delta",
]
