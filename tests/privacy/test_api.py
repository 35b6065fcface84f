"""The public API of dpmtv.privacy is pinned, and the package imports no model code."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import dpmtv.privacy as privacy

PRIVACY_DIR = Path(privacy.__file__).parent
ALLOWED_THIRD_PARTY = {"numpy", "scipy", "dp_accounting", "opendp"}
ALLOWED_DPMTV = ("dpmtv.errors", "dpmtv.privacy")

EXPECTED_ALL = {
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
}


def test_all_is_pinned_and_resolves():
    assert set(privacy.__all__) == EXPECTED_ALL
    for name in privacy.__all__:
        assert getattr(privacy, name) is not None


def _imported_modules(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module)
    return names


def test_privacy_modules_import_only_pure_dependencies():
    stdlib = set(sys.stdlib_module_names) | {"__future__"}
    for path in sorted(PRIVACY_DIR.glob("*.py")):
        for module in _imported_modules(path):
            root = module.split(".")[0]
            ok = root in stdlib or root in ALLOWED_THIRD_PARTY or module.startswith(ALLOWED_DPMTV)
            assert ok, f"{path.name} imports {module}"
