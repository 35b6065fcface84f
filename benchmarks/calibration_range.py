"""Noise calibration over the supported (ε, δ) range: σ of the default OpenDP sampler against the
analytic Gaussian, against OpenDP's zCDP map, and the time one release plan takes.

    PYTHONPATH=src python benchmarks/calibration_range.py --out benchmarks/results/calibration_range.json

For each (ε, δ): ``sigma_plan`` (per unit Δ, what a build draws with ``--noise-sampler opendp``),
``sigma_analytic`` (dp-accounting ``get_sigma_gaussian``), ``sigma_zcdp_map`` (OpenDP's own map,
the σ the previous release used), their ratios, and the wall time of ``plan_gaussian_release``
(one PLD calibration plus OpenDP's map search).
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from pathlib import Path

import dp_accounting

from dpmtv.privacy import OpenDPGaussianSampler, plan_gaussian_release
from dpmtv.privacy.calibrate import SUPPORTED_DELTA, SUPPORTED_EPSILON

EPSILONS = (SUPPORTED_EPSILON[0], 0.1, 1.0, 4.0, SUPPORTED_EPSILON[1])
DELTAS = (SUPPORTED_DELTA[0], 1e-8, 1e-5, SUPPORTED_DELTA[1])


def measure(epsilon: float, delta: float) -> dict:
    start = time.perf_counter()
    plan = plan_gaussian_release(
        l2_sensitivity=1.0, epsilon=epsilon, delta=delta, sampler=OpenDPGaussianSampler()
    )
    seconds = time.perf_counter() - start
    analytic = float(dp_accounting.get_sigma_gaussian(epsilon, delta))
    return {
        "epsilon": epsilon,
        "delta": delta,
        "sigma_plan": plan.noise_std,
        "sigma_analytic": analytic,
        "sigma_zcdp_map": plan.noise_std_sampler_map,
        "plan_over_analytic": plan.noise_std / analytic,
        "zcdp_over_analytic": plan.noise_std_sampler_map / analytic,
        "plan_seconds": round(seconds, 3),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    rows = []
    for epsilon in EPSILONS:
        for delta in DELTAS:
            rows.append(measure(epsilon, delta))
            print(json.dumps(rows[-1]), flush=True)
    result = {
        "command": " ".join(["python", *sys.argv]),
        "machine": platform.platform(),
        "rows": rows,
        "max_plan_over_analytic": max(r["plan_over_analytic"] for r in rows),
    }
    args.out.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
