"""The typed, validated settings of a build: every public choice, checked once when constructed.

Keyword-only, frozen, enums for the choices that decide the guarantee (privacy unit, neighbouring
relation) and the prompt (query, centering). The enums are ``str`` enums, so ``"user"`` and
``PrivacyUnit.USER`` are both accepted and compare equal; a ``query``/``center`` string that names
no kind is read as a path (the CLI's form) and moved to ``query_image``/``center_records``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from enum import Enum
from pathlib import Path
from typing import Any, TypeVar

from dpmtv.data.prompts import DEFAULT_QUERY_QUESTION
from dpmtv.errors import ParameterError
from dpmtv.pipeline.defaults import (
    DEFAULT_CLIP_EPSILON_FRACTION,
    DEFAULT_CLIP_TOLERANCE,
    DEFAULT_CLIP_UTILITY,
    DEFAULT_L2_CLIP_NORM,
    DEFAULT_SHOTS_PER_CHUNK,
)
from dpmtv.pipeline.selection_defaults import default_selection_fraction, default_selection_utility
from dpmtv.privacy import AdjacencyRelation, parse_relation
from dpmtv.privacy.clip_quantile import CLIP_UTILITIES, DEFAULT_CLIP_QUANTILE, clip_norm_candidates
from dpmtv.privacy.units import PrivacyUnit, check_partition_parameters, parse_privacy_unit

__all__ = [
    "DEFAULT_L2_CLIP_NORM",
    "DEFAULT_SHOTS_PER_CHUNK",
    "BuildSettings",
    "Centering",
    "PrivateClipSettings",
    "PrivateSelectionSettings",
    "QueryKind",
]


class QueryKind(str, Enum):
    """Each chunk's query: one of its records (answer withheld), a blank image, or a public image."""

    RECORD = "record"
    BLANK = "blank"
    PUBLIC_IMAGE = "public-image"


class Centering(str, Enum):
    """The public reference subtracted before clipping."""

    NONE = "none"
    BLANK = "blank"
    PUBLIC_RECORDS = "public-records"


@dataclass(frozen=True, kw_only=True)
class PrivateSelectionSettings:
    """Private head selection inside the build (DP-MTV, arXiv 2603.04894): each chunk votes for
    its top-k' heads, a one-shot noisy top-k picks ``k``. ``composition``: "sequential"
    (selection and release on all chunks, the budget split by ``selection_fraction``) or
    "parallel" (disjoint halves of the chunks, each step at the full budget, m/2 chunks each).

    ``utility`` and ``selection_fraction`` left ``None`` take their defaults
    (:mod:`dpmtv.pipeline.selection_defaults`) at record level here; ``defaulted`` names them, so
    that :class:`BuildSettings` can redo them at user level."""

    k: int
    selection_fraction: float | None = None  # None: the method's share (0.5 votes, 0.3 or 0.1 candidates)
    composition: str = "sequential"
    max_votes_per_chunk: int | None = None
    pool: str = "all"  # public head spec of the candidates
    # "votes": the chunks' head votes, noisy top-k; "candidates": one exponential-mechanism choice
    # among the public list ``candidates`` of head sets by the chunks' ``utility``
    # (dpmtv.selection.candidates; k is then unused)
    method: str = "votes"
    # chosen on the dev set (benchmarks/results/private_only_dev_noise_aware.json, seed 100, 10
    # tasks): noisy-probability over layer-groups 0.670 (exact argmax 0.738), over layer-subsets
    # 0.669, plain probability over layer-subsets 0.597, parallel halves 0.652; public 0.817
    candidates: str = "layer-groups"
    # the choice on the release (dpmtv.selection.released), record level and sequential only: dev
    # (benchmarks/results/private_only_dev_released.json, 10 tasks x 2 seeds, private C) 0.744 at
    # 0.1 ε against 0.666 for noisy-probability at 0.3 ε and 0.693 for public heads and C
    utility: str | None = None  # None: released-probability, noisy-probability where that cannot run
    # a "noisy-" utility adds the release's noise for each candidate to the chunk's mean; with a
    # private C that noise is planned at this PUBLIC nominal clip multiplier (C_l = c·g_l of the
    # candidate's heads), the real c being chosen after the selection (dpmtv.pipeline.selection_noise)
    noise_clip_multiplier: float = 2.0
    defaulted: frozenset[str] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        self._resolve_defaults(PrivacyUnit.RECORD)
        if not (isinstance(self.k, int) and self.k >= 1):
            raise ParameterError(f"private selection k (--select-k) must be an integer >= 1, got {self.k!r}")
        if self.composition not in ("sequential", "parallel"):
            raise ParameterError(
                f"selection composition must be 'sequential' or 'parallel', got {self.composition!r}"
            )
        allowed = {
            "method": ("votes", "candidates"),
            # dpmtv.candidate_lists.CANDIDATE_LISTS, dpmtv.selection.candidates.CANDIDATE_UTILITIES
            # (a test keeps them equal)
            "candidates": ("layer-subsets", "layer-blocks", "layer-groups"),
            "utility": (
                "correct",
                "probability",
                "noisy-correct",
                "noisy-probability",
                "released-probability",
            ),
        }
        for name, choices in allowed.items():
            value = getattr(self, name)
            if value not in choices:
                raise ParameterError(
                    f"private selection {name} must be one of {', '.join(choices)}, got {value!r}"
                )
        if self.chooses_after_release and self.composition != "sequential":
            raise ParameterError(
                f"--selection-utility {self.utility} scores the candidates on the release of every chunk: "
                "it composes sequentially only (drop --selection-composition parallel)"
            )
        if not (
            isinstance(self.noise_clip_multiplier, (int, float)) and 0 < self.noise_clip_multiplier < math.inf
        ):
            raise ParameterError(
                "the noisy utility's nominal clip multiplier must be finite and > 0, "
                f"got {self.noise_clip_multiplier!r}"
            )

    @property
    def chooses_after_release(self) -> bool:
        """A candidate choice on the released pool vector (dpmtv.selection.released), not before it."""
        return self.method == "candidates" and str(self.utility).startswith("released-")

    def for_unit(self, unit: PrivacyUnit) -> PrivateSelectionSettings:
        """These settings with their defaulted fields redone for the build's privacy unit."""
        if unit is PrivacyUnit.RECORD or not self.defaulted:
            return self
        values: dict[str, Any] = {}
        if "utility" in self.defaulted:
            values["utility"] = default_selection_utility(composition=self.composition, privacy_unit=unit)
        if "selection_fraction" in self.defaulted:
            utility = str(values.get("utility", self.utility))
            values["selection_fraction"] = default_selection_fraction(method=self.method, utility=utility)
        redone = replace(self, **values)
        object.__setattr__(redone, "defaulted", self.defaulted)
        return redone

    def _resolve_defaults(self, unit: PrivacyUnit) -> None:
        """Fill the ``None`` fields from :mod:`dpmtv.pipeline.selection_defaults`."""
        defaulted = {name for name in ("utility", "selection_fraction") if getattr(self, name) is None}
        if self.utility is None:
            utility = default_selection_utility(composition=self.composition, privacy_unit=unit)
            object.__setattr__(self, "utility", utility)
        if self.selection_fraction is None:
            fraction = default_selection_fraction(method=self.method, utility=str(self.utility))
            object.__setattr__(self, "selection_fraction", fraction)
        object.__setattr__(self, "defaulted", frozenset(defaulted))


@dataclass(frozen=True, kw_only=True)
class PrivateClipSettings:
    """``--l2-clip-norm private``: the clip norms chosen inside the build from the release chunks'
    own norms, in one ``epsilon_fraction·ε``-DP round
    (:func:`dpmtv.privacy.clip_quantile.private_clip_multiplier`): layer ``l`` is clipped at
    ``c·g_l``, ``g_l`` the released heads' norm in that layer on a public blank-image prompt, ``c``
    the private ``quantile`` of each chunk's largest norm-to-``g`` ratio over the public geometric
    grid of ``multiplier_count`` multipliers from ``multiplier_low`` to ``multiplier_high``, scored
    by ``utility``: OpenDP's "quantile" score or the clipped "log-loss" (pinball loss in log space,
    each chunk's term clipped at a ``tolerance``-fold miss). The release's σ is calibrated on the
    rest of the budget (the PLD accountant composes both)."""

    # chosen on the DEV set of benchmarks/private_only.py --split dev (docs/design.md §2)
    epsilon_fraction: float = DEFAULT_CLIP_EPSILON_FRACTION
    quantile: float = DEFAULT_CLIP_QUANTILE
    multiplier_low: float = 1 / 64
    multiplier_high: float = 64.0
    multiplier_count: int = 49
    utility: str = DEFAULT_CLIP_UTILITY
    tolerance: float = DEFAULT_CLIP_TOLERANCE

    def __post_init__(self) -> None:
        if not 0.0 < self.epsilon_fraction < 1.0:
            raise ParameterError(
                f"the private clip norm's share of epsilon (--clip-epsilon-fraction) must be in (0, 1), "
                f"got {self.epsilon_fraction!r}"
            )
        if not 0.0 < self.quantile < 1.0:
            raise ParameterError(f"--clip-quantile must be in (0, 1), got {self.quantile!r}")
        if self.utility not in CLIP_UTILITIES:
            raise ParameterError(
                f"--clip-utility must be one of {', '.join(CLIP_UTILITIES)}, got {self.utility!r}"
            )
        if not (isinstance(self.tolerance, (int, float)) and 1.0 < float(self.tolerance) < float("inf")):
            raise ParameterError(f"--clip-tolerance must be a finite factor > 1, got {self.tolerance!r}")

    @property
    def multipliers(self) -> tuple[float, ...]:
        return clip_norm_candidates(
            low=self.multiplier_low, high=self.multiplier_high, count=self.multiplier_count
        )

    def to_metadata(self) -> dict[str, Any]:
        return {
            "method": "private-quantile",
            "epsilon_fraction": self.epsilon_fraction,
            "quantile": self.quantile,
            "multiplier_low": self.multiplier_low,
            "multiplier_high": self.multiplier_high,
            "multiplier_count": self.multiplier_count,
            "utility": self.utility,
            "tolerance": self.tolerance,
        }


@dataclass(frozen=True, kw_only=True)
class BuildSettings:
    """Everything a build needs besides the model, the records and the head set.

    ``neighbouring_relation`` None means the unit's own relation: replace-one for records,
    add-remove-one for users (the only one user level supports). ``num_chunks`` is required
    exactly when the relation is add-remove-one, ``max_records_per_user`` exactly at user level.
    """

    epsilon: float
    delta: float
    l2_clip_norm: tuple[float, ...]  # one value, or one per released layer (per pool layer)
    shots_per_chunk: int  # records per chunk (s); with query RECORD s-1 are demonstrations
    privacy_unit: PrivacyUnit = PrivacyUnit.RECORD
    neighbouring_relation: AdjacencyRelation | None = None
    num_chunks: int | None = None  # public m (add-remove-one, user level)
    max_records_per_user: int | None = None  # public cap k (user level)
    query: QueryKind = QueryKind.RECORD
    query_image: Path | None = None  # the public image of QueryKind.PUBLIC_IMAGE
    query_question: str = DEFAULT_QUERY_QUESTION  # public; used with blank/public queries
    center: Centering = Centering.NONE
    center_records: Path | None = None  # the public records of Centering.PUBLIC_RECORDS
    batch_size: int = 4
    noise_sampler: str = "opendp"
    insecure_seed: int | None = None  # seeds EVERY random choice of the build (INSECURE)
    allow_insecure_seed: bool = False
    non_private: bool = False
    show_private_counts: bool = False  # N, #users, dropped records in the notes (never stored)
    private_selection: PrivateSelectionSettings | None = None
    # None: l2_clip_norm is used as given; else C is chosen privately inside the build
    private_clip: PrivateClipSettings | None = None
    head_selection: dict[str, Any] = field(default_factory=lambda: {"method": "user"})
    progress: bool = True
    # Public token budget of one chunk prompt (None: the model's position limit); longer prompts
    # follow dpmtv.forward.prompt_budget.OVER_LENGTH_RULE.
    max_prompt_tokens: int | None = None
    # Chunk prompts per private forward pass at fixed public shapes (dpmtv.forward.fixed_shapes; None: 16
    # where the family allows it and max_prompt_tokens is given, else 1 = one chunk per pass).
    private_batch_size: int | None = None
    # Processes preparing chunk inputs for the private passes (None: from the cores and device,
    # dpmtv.forward._prepare.default_prepare_workers; 0: one background thread). Changes no value.
    prepare_workers: int | None = None

    def __post_init__(self) -> None:
        unit = parse_privacy_unit(self.privacy_unit)
        relation = relation_for_unit(unit, self.neighbouring_relation)
        self._set(privacy_unit=unit, neighbouring_relation=relation)
        self._set(l2_clip_norm=tuple(self.l2_clip_norm))
        self._set_query()
        self._set_center()
        _check_counts(self)
        if self.non_private and self.private_selection is not None:
            raise ParameterError("private head selection makes no sense in a non-private build")
        if self.non_private and self.private_clip is not None:
            raise ParameterError("a private clip norm makes no sense in a non-private build")
        selection = None if self.private_selection is None else self.private_selection.for_unit(unit)
        self._set(private_selection=selection)
        if selection is not None and selection.chooses_after_release and unit is PrivacyUnit.USER:
            raise ParameterError(
                f"--selection-utility {selection.utility} scores every record once: a user's records would "
                "move its totals by up to --max-records-per-user, so it is for --privacy-unit record only "
                "(use noisy-probability at user level)"
            )

    @property
    def relation(self) -> AdjacencyRelation:
        """The resolved neighbouring relation (never None after construction)."""
        return relation_for_unit(self.privacy_unit, self.neighbouring_relation)

    @property
    def query_source(self) -> str:
        """The query as :func:`~dpmtv.data.prompts.chunk_prompt` takes it: "record", "blank", a path."""
        return str(self.query_image) if self.query is QueryKind.PUBLIC_IMAGE else self.query.value

    @property
    def center_source(self) -> str:
        """ "none", "blank" or the public records' path."""
        return str(self.center_records) if self.center is Centering.PUBLIC_RECORDS else self.center.value

    def _set(self, **values: Any) -> None:
        for name, value in values.items():
            object.__setattr__(self, name, value)

    def _set_query(self) -> None:
        kind, image = _kind_or_path(QueryKind, self.query, self.query_image, QueryKind.PUBLIC_IMAGE, "query")
        self._set(query=kind, query_image=image)

    def _set_center(self) -> None:
        kind, records = _kind_or_path(
            Centering, self.center, self.center_records, Centering.PUBLIC_RECORDS, "center"
        )
        self._set(center=kind, center_records=records)


def relation_for_unit(unit: PrivacyUnit | str, relation: AdjacencyRelation | str | None) -> AdjacencyRelation:
    """The build's relation: the one given, or the unit's own (replace-one for records,
    add/remove-one for users)."""
    unit = PrivacyUnit(unit)
    if relation is None:
        return AdjacencyRelation.ADD_REMOVE_ONE if unit is PrivacyUnit.USER else AdjacencyRelation.REPLACE_ONE
    return parse_relation(relation)  # user level with replace-one: refused by _check_counts


E = TypeVar("E", bound=Enum)


def _kind_or_path(
    kinds: type[E], value: E | str | Path, path: Path | None, path_kind: E, name: str
) -> tuple[E, Path | None]:
    """(kind, path): an enum member or its value; any other string is a path of ``path_kind``."""
    if isinstance(value, kinds):
        kind = value
    elif isinstance(value, (str, Path)) and str(value) in {k.value for k in kinds}:
        kind = kinds(str(value))
    elif isinstance(value, (str, Path)) and path is None:
        kind, path = path_kind, Path(value)
    else:
        raise ParameterError(f"{name} must be one of {[k.value for k in kinds]} or a path, got {value!r}")
    if (kind is path_kind) != (path is not None):
        raise ParameterError(f"{name} {kind.value!r} and its path {path!r} do not go together")
    return kind, None if path is None else Path(path)


def _check_counts(settings: BuildSettings) -> None:
    """Public counts that the unit and relation need (or must not be given)."""
    for name in ("shots_per_chunk", "batch_size"):
        value = getattr(settings, name)
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ParameterError(f"{name} must be an integer >= 1, got {value!r}")
    rows = settings.private_batch_size
    if rows is not None and (isinstance(rows, bool) or not isinstance(rows, int) or rows < 1):
        raise ParameterError(f"private_batch_size must be an integer >= 1, got {rows!r}")
    workers = settings.prepare_workers
    if workers is not None and (isinstance(workers, bool) or not isinstance(workers, int) or workers < 0):
        raise ParameterError(f"prepare_workers must be an integer >= 0, got {workers!r}")
    check_partition_parameters(
        unit=settings.privacy_unit,
        relation=settings.relation,
        num_chunks=settings.num_chunks,
        max_records_per_user=settings.max_records_per_user,
    )
