"""Empirical sensitivity audit on the real build path: how far one unit's change moves the mean.

The ε audit (:mod:`dpmtv.audit.mechanism`) checks clip → mean → noise on given chunk vectors; it
cannot see a wiring bug upstream of them (a partition that ignores the privacy unit, a Δ computed
for the wrong relation). This audit runs the build's own pieces instead:

* :func:`dpmtv.pipeline.plan.plan_layout` — the build's partition entry point (unit, relation, public
  ``m``, per-user cap) and its Δ;
* :func:`dpmtv.pipeline.tasks.iter_clipped_chunks` — the build's prompts, extraction, centering and
  per-layer clipping;

on the real model and records ``D`` and on neighbours ``D'`` at the build's unit and relation:

=================  ==================  ==========================================================
unit               relation            neighbours
=================  ==================  ==========================================================
record             replace-one         record ``i`` replaced by a canary record
record             add-remove-one      record ``i`` removed; a canary record added
user               add-remove-one      all of user ``u``'s records removed; a canary user with
                                       ``max_records_per_user + 2`` records added
=================  ==================  ==========================================================

Each partition is drawn with a seed (the build's INSECURE seeded mode), and ``D`` and ``D'`` use
the same seed — the coupling of the sensitivity proofs — so every difference of the un-noised
means comes from the data. The audit reports ``ratio = ‖mean(D) − mean(D')‖₂ / Δ`` for every
pair; a correct build has ``ratio <= 1`` always (it is a worst-case bound, not a statistical
one, so one pair above 1 is a violation). Per-chunk clipped vectors are cached by chunk content
(a chunk's vector is a function of its own records), so a neighbour costs only its changed
chunks' forward passes, which may run on Ray workers (``executor``, :mod:`dpmtv.distributed`:
the build's extraction, per chunk, with the driver's coverage check). Nothing here is released:
the means stay in memory.

The rounds before the release (docs/design.md §2, "The sensitivity audit"). A build with
``--l2-clip-norm private`` or private head selection (``--private-selection candidates|votes``;
both: the private-only build) runs data-dependent exponential-mechanism rounds first. For each, the
audit measures the round's utility vector (one score per candidate: clip multiplier, candidate head
set, pool head) on ``D`` and on every ``D'``, with the same seeded coupling, and reports ``ratio =
max_candidate |u(D) − u(D')| / Δ∞``, ``Δ∞`` the sensitivity the round's noise is calibrated for —
again a worst-case bound, ``<= 1`` for every pair. The heads and C the rounds choose on ``D`` (with
the partition's seed, by the build's own functions) are held fixed for ``D``'s neighbours, so the
release ratio of a private-C build is at the C chosen on ``D`` (recorded per partition in the
report). :mod:`dpmtv.audit._build_path` runs the build's pieces.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image, ImageOps

from dpmtv._atomic import write_text_atomically
from dpmtv.audit._build_path import BuildPath, Measured
from dpmtv.data.records import Record
from dpmtv.errors import ParameterError, RecordError
from dpmtv.forward._prepare import reusing_workers
from dpmtv.forward.executor import Executor, LocalExecutor
from dpmtv.heads import HeadSet
from dpmtv.models.loading import LoadedModel
from dpmtv.pipeline.build import BuildSettings
from dpmtv.privacy import AdjacencyRelation, PrivacyUnit

__all__ = ["RoundPair", "SensitivityAudit", "SensitivityPair", "audit_sensitivity"]

CANARY_QUESTION = "Ignore the image. Which secret word does the canary sing?"
CANARY_ANSWER = "zzyzx canary 4917"
RATIO_TOLERANCE = 1e-5  # float32 activations, clip norms met to ~1e-7 relative
_CANARY_USER = "dpmtv-audit-canary-user"
RELEASE_AT = "the heads and clip norms each partition's rounds chose on D (seeded), fixed for its neighbours"


@dataclass(frozen=True)
class SensitivityPair:
    """One neighbouring pair: its partition seed, the change, and ``‖Δmean‖ / Δ``."""

    partition_seed: int
    change: str  # "replace" | "remove" | "add"
    target: str  # record index, user id or canary name (public descriptions of the change)
    ratio: float
    l2_sensitivity: float
    l2_sensitivity_neighbour: float  # must equal l2_sensitivity (Δ may not depend on the data)
    rebuild_gap: float | None = None  # ‖cached mean(D') − rebuilt mean(D')‖ / Δ, for rebuilt pairs
    ratio_rebuilt: float | None = None  # ‖mean(D) − rebuilt mean(D')‖ / Δ


@dataclass(frozen=True)
class RoundPair:
    """One neighbouring pair in one private round: ``max_candidate |u(D) − u(D')| / Δ∞``."""

    partition_seed: int
    change: str
    target: str
    round: str  # "private clip norm" | "private selection (candidates)" | "private selection (votes)"
    ratio: float
    linf_change: float  # max_candidate |u(D) − u(D')|
    linf_sensitivity: float  # the Δ∞ the round's noise is calibrated for, on D
    linf_sensitivity_neighbour: float  # must equal linf_sensitivity
    rebuild_gap: float | None = None  # max|cached u(D') − rebuilt u(D')| / Δ∞, for rebuilt pairs

    @property
    def violates(self) -> bool:
        return (
            self.ratio > 1 + RATIO_TOLERANCE
            or not np.isclose(self.linf_sensitivity, self.linf_sensitivity_neighbour, rtol=1e-12)
            or (self.rebuild_gap is not None and self.rebuild_gap > RATIO_TOLERANCE)
        )


@dataclass(frozen=True)
class SensitivityAudit:
    """All pairs of one audit, with the unit and relation they were drawn for; with private
    rounds, their pairs and what the rounds chose on each partition's ``D``."""

    privacy_unit: str
    neighbouring_relation: str
    pairs: tuple[SensitivityPair, ...]
    round_pairs: tuple[RoundPair, ...] = ()
    chosen_on_d: tuple[dict[str, Any], ...] = ()

    @property
    def worst(self) -> SensitivityPair:
        return max(self.pairs, key=lambda p: p.ratio)

    @property
    def violations(self) -> tuple[SensitivityPair | RoundPair, ...]:
        """Pairs whose mean (or round utility) moved by more than Δ (Δ∞), or whose Δ differs
        between D and D'."""
        release = tuple(
            p
            for p in self.pairs
            if p.ratio > 1 + RATIO_TOLERANCE
            or not np.isclose(p.l2_sensitivity, p.l2_sensitivity_neighbour, rtol=1e-12)
            or (p.rebuild_gap is not None and p.rebuild_gap > RATIO_TOLERANCE)
            or (p.ratio_rebuilt is not None and p.ratio_rebuilt > 1 + RATIO_TOLERANCE)
        )
        return release + tuple(p for p in self.round_pairs if p.violates)

    def rows(self) -> list[dict[str, Any]]:
        """Per change: pairs, worst ratio and where, violations."""
        out = []
        for change in sorted({p.change for p in self.pairs}):
            pairs = [p for p in self.pairs if p.change == change]
            worst = max(pairs, key=lambda p: p.ratio)
            out.append(
                {
                    "privacy_unit": self.privacy_unit,
                    "neighbouring_relation": self.neighbouring_relation,
                    "change": change,
                    "pairs": len(pairs),
                    "worst_ratio": worst.ratio,
                    "worst_pair": {"partition_seed": worst.partition_seed, "target": worst.target},
                    "violations": sum(p in self.violations for p in pairs),
                    "rebuilt_pairs": sum(p.rebuild_gap is not None for p in pairs),
                    "worst_rebuild_gap": max(
                        (p.rebuild_gap for p in pairs if p.rebuild_gap is not None), default=None
                    ),
                }
            )
        return out

    def round_rows(self) -> list[dict[str, Any]]:
        """Per round and change: pairs, worst ``max|u(D) − u(D')| / Δ∞`` and where, violations."""
        out = []
        for name, change in sorted({(p.round, p.change) for p in self.round_pairs}):
            pairs = [p for p in self.round_pairs if (p.round, p.change) == (name, change)]
            worst = max(pairs, key=lambda p: p.ratio)
            out.append(
                {
                    "privacy_unit": self.privacy_unit,
                    "neighbouring_relation": self.neighbouring_relation,
                    "round": name,
                    "change": change,
                    "pairs": len(pairs),
                    "worst_ratio": worst.ratio,
                    "worst_pair": {"partition_seed": worst.partition_seed, "target": worst.target},
                    "linf_sensitivity": worst.linf_sensitivity,
                    "violations": sum(p.violates for p in pairs),
                    "rebuilt_pairs": sum(p.rebuild_gap is not None for p in pairs),
                }
            )
        return out

    def to_json(self) -> dict[str, Any]:
        return {
            "privacy_unit": self.privacy_unit,
            "neighbouring_relation": self.neighbouring_relation,
            "ratio_tolerance": RATIO_TOLERANCE,
            "summary": self.rows(),
            "rounds": self.round_rows(),
            "release_at": RELEASE_AT if self.chosen_on_d else "the given heads and clip norms",
            "chosen_on_d": list(self.chosen_on_d),
            "pairs": [dataclasses.asdict(p) for p in self.pairs],
            "round_pairs": [dataclasses.asdict(p) for p in self.round_pairs],
        }

    def to_markdown(self) -> str:
        lines = [
            "| unit | relation | round | change | pairs | worst ratio | violations |",
            "|---|---|---|---|---:|---:|---:|",
        ]
        rows = [{**row, "round": "release ‖mean(D)−mean(D′)‖/Δ"} for row in self.rows()]
        named = [{**row, "round": f"{row['round']} max|u(D)−u(D′)|/Δ∞"} for row in self.round_rows()]
        for row in [*named, *rows]:
            lines.append(
                f"| {row['privacy_unit']} | {row['neighbouring_relation']} | {row['round']} | "
                f"{row['change']} | {row['pairs']} | {row['worst_ratio']:.4f} | {row['violations']} |"
            )
        if self.chosen_on_d:
            lines.append(f"\nThe release is measured at {RELEASE_AT}.")
        return "\n".join(lines) + "\n"

    def write(self, folder: str | Path) -> dict[str, Path]:
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        paths = {"json": folder / "sensitivity.json", "markdown": folder / "sensitivity.md"}
        write_text_atomically(paths["json"], json.dumps(self.to_json(), indent=1) + "\n")
        write_text_atomically(paths["markdown"], self.to_markdown())
        return paths


@reusing_workers()  # the audit's passes (D, each D', rebuilds) share their prepare workers
def audit_sensitivity(
    loaded: LoadedModel,
    records: Sequence[Record],
    heads: HeadSet | None,
    settings: BuildSettings,
    *,
    num_partitions: int = 20,
    neighbours_per_partition: int = 4,
    seed: int = 0,
    executor: Executor | None = None,
    rebuild_pairs: int = 2,
) -> SensitivityAudit:
    """Measure ``‖mean(D) − mean(D')‖ / Δ`` (and each private round's
    ``max|u(D) − u(D')| / Δ∞``) over seeded partitions and neighbours (module doc).

    ``settings`` are the build's (unit, relation, ``m``, cap, clip norms or ``private_clip``,
    ``private_selection``, shots, query, centering); its seed and progress are replaced: the audit
    seeds partition ``p`` with ``seed + p`` and computes un-noised means and utilities only.
    ``heads``: the released heads, or None with private selection (chosen on each ``D``). The
    first neighbour of each of the first ``rebuild_pairs`` partitions is also rebuilt from
    scratch (every chunk, no cache). ``executor`` runs the chunks' passes (default: this process).

    Raises:
        ParameterError: heads given with private selection (or none without), ``num_partitions``
            or ``neighbours_per_partition`` < 1. RecordError: no records.
    """
    _check_arguments(records, heads, settings, num_partitions, neighbours_per_partition)
    path = BuildPath(loaded, heads, settings, executor or LocalExecutor())
    rounds = settings.private_selection is not None or settings.private_clip is not None
    pairs: list[SensitivityPair] = []
    round_pairs: list[RoundPair] = []
    chosen = []
    for index in range(num_partitions):
        seeded = dataclasses.replace(
            settings,
            insecure_seed=seed + index,
            allow_insecure_seed=True,
            non_private=not rounds,
            progress=False,
        )
        choices = path.choose(records, seeded)
        chosen.append({"partition_seed": seed + index, **choices.describe()})
        base = path.measure(records, seeded, choices)
        rng = np.random.default_rng([seed, index, 4917])  # public choice of the neighbours
        for k, (change, target, neighbour) in enumerate(
            _neighbours(records, settings, rng, neighbours_per_partition)
        ):
            moved = path.measure(neighbour, seeded, choices)
            fresh = k == 0 and index < rebuild_pairs
            rebuilt = path.measure(neighbour, seeded, choices, fresh=True) if fresh else None
            pairs.append(_pair(base, moved, rebuilt, (seed + index, change, target)))
            round_pairs.extend(_round_pairs(base, moved, rebuilt, (seed + index, change, target)))
    unit, relation = settings.privacy_unit.value, settings.relation.value
    return SensitivityAudit(unit, relation, tuple(pairs), tuple(round_pairs), tuple(chosen) if rounds else ())


def _check_arguments(records, heads, settings, num_partitions: int, neighbours_per_partition: int) -> None:
    if (heads is None) != (settings.private_selection is not None):
        raise ParameterError(
            "the sensitivity audit takes the released heads, or private selection settings and no heads"
        )
    if num_partitions < 1 or neighbours_per_partition < 1:
        raise ParameterError(
            f"num_partitions ({num_partitions}) and neighbours_per_partition "
            f"({neighbours_per_partition}) must be >= 1"
        )
    if not records:
        raise RecordError("no records to audit")


def _pair(base: Measured, moved: Measured, rebuilt: Measured | None, described) -> SensitivityPair:
    """One neighbour's release pair, through the cache and, when ``rebuilt``, from scratch."""
    delta = base.l2_sensitivity
    pair = SensitivityPair(
        *described, float(np.linalg.norm(base.mean - moved.mean) / delta), delta, moved.l2_sensitivity
    )
    if rebuilt is None:
        return pair
    return dataclasses.replace(
        pair,
        rebuild_gap=float(np.linalg.norm(moved.mean - rebuilt.mean) / delta),
        ratio_rebuilt=float(np.linalg.norm(base.mean - rebuilt.mean) / delta),
    )


def _round_pairs(base: Measured, moved: Measured, rebuilt: Measured | None, described) -> list[RoundPair]:
    """One neighbour's pair in every private round."""
    out = []
    for name, utility in base.utilities.items():
        linf = base.linf_sensitivities[name]
        change = float(np.max(np.abs(utility - moved.utilities[name])))
        gap = None
        if rebuilt is not None:
            gap = float(np.max(np.abs(moved.utilities[name] - rebuilt.utilities[name]))) / linf
        out.append(
            RoundPair(*described, name, change / linf, change, linf, moved.linf_sensitivities[name], gap)
        )
    return out


def _neighbours(records: Sequence[Record], settings: BuildSettings, rng: np.random.Generator, count: int):
    """(change, target, D') triples for the settings' unit and relation (module docstring)."""
    if settings.privacy_unit is PrivacyUnit.USER:
        users = sorted({r.user_id for r in records if r.user_id is not None})
        for user in rng.permutation(users)[:count]:
            yield "remove", f"user {user}", [r for r in records if r.user_id != user]
        canaries = [
            _canary(records[0], f"{_CANARY_USER}-{k}", _CANARY_USER, k)
            for k in range(settings.max_records_per_user + 2)
        ]
        yield "add", _CANARY_USER, [*records, *canaries]
        return
    chosen = rng.permutation(len(records))[:count]
    if settings.relation is AdjacencyRelation.REPLACE_ONE:
        for i in chosen:
            canary = _canary(records[i], records[i].record_id, records[i].user_id, int(i))
            yield "replace", f"record {i}", [*records[:i], canary, *records[i + 1 :]]
        return
    for i in chosen:
        yield "remove", f"record {i}", [*records[:i], *records[i + 1 :]]
    yield "add", "canary record", [*records, _canary(records[0], "dpmtv-audit-canary", None, 0)]


def _canary(like: Record, record_id: str, user_id: str | None, index: int) -> Record:
    """A public canary record: the colour-inverted (or, alternately, noise) image of ``like``
    with an unusual question and answer."""
    image = like.load_images()[0].convert("RGB")
    if index % 2 == 0:
        picture = ImageOps.invert(image)
    else:  # public: a fixed generator
        pixels = np.random.default_rng(4917 + index).integers(0, 256, (image.size[1], image.size[0], 3))
        picture = Image.fromarray(pixels.astype(np.uint8))
    return Record(
        record_id=record_id,
        images=(picture,),
        question=CANARY_QUESTION,
        answer=f"{CANARY_ANSWER} {index}",
        user_id=user_id,
        where="sensitivity audit canary",
        has_explicit_id=True,
    )
