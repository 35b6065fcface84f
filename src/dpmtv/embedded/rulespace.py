"""The embedded rule space (v3) and its public hold-out: which truth tables training may draw.

Why so many rules: transformers trained on few tasks learn to *recognise* them (a new prompt is
answered like the closest memorised task); past a threshold of task diversity they switch to
general in-context learning (Raventós et al., NeurIPS 2023, "Pretraining task diversity and the
emergence of non-Bayesian in-context learning"; Kirsch et al. 2022, "General-purpose in-context
learning by meta-learning transformers", where the transition needs many tasks and a large enough
state). Label-map learning in context emerges with bursty episodes over many classes (Chan et al.,
NeurIPS 2022, "Data distributional properties drive emergent in-context learning in
transformers"), which the label-map episodes provide (every episode is one fresh map, its classes
recur within it). So the space holds thousands of yes/no tables instead of 284:

=============  =======================================================  =========
shape          example                                                   trained
=============  =======================================================  =========
single         ``red``, ``not circle``                                   yes
and2 / or2     ``green and cross``, ``yellow or not square``             yes
xor2           ``red xor big``                                           yes
and3 / or3     ``red and circle and big``                                yes
at_least_2     ``at least 2 of (red, circle, big)``                      yes
parity3        ``red xor circle xor big``                                never
and_or         ``(red and circle) or left``                              never
=============  =======================================================  =========

Literals are attribute values and, for the 4-valued colour and shape, their negations; the
operands of one rule lie on different attributes. The **hold-out is a public rule**: a table is
trained (:func:`trained`) iff a trained shape produces it and it is not held out, where held out
means (a) the legacy held-out predicates of the first embedded models
(:data:`LEGACY_HELD_OUT`) or their complements, or (b) a table of a new trained shape (xor2, and3,
or3, at_least_2) whose canonical form hashes to 0 mod :data:`HASH_HOLD_OUT_MODULUS` (CRC-32),
unless the older models were already trained on it. A table and its complement are always on
the same side (yes/no is symmetric for a learner). Whole shapes (parity3, and_or) are never
trained, so held-out evaluation includes rules of a form training never saw.
"""

from __future__ import annotations

import itertools
import zlib
from dataclasses import dataclass
from functools import cache

import numpy as np

from dpmtv.embedded import rules as R
from dpmtv.embedded.world import ATTRIBUTES, VALUES

#: Legacy held-out predicates (the first embedded models never trained them nor their complements).
LEGACY_HELD_OUT: tuple[str, ...] = (
    "is_green",
    "is_cross",
    "green_and_cross",
    "blue_and_small",
    "circle_and_right",
    "big_and_left",
    "yellow_or_square",
    "triangle_or_big",
    "red_and_not_circle",
    "not_blue_or_left",
)
LEGACY_SHAPES = ("single", "and2", "or2")
NEW_TRAINED_SHAPES = ("xor2", "and3", "or3", "at_least_2")
HELD_OUT_SHAPES = ("parity3", "and_or")
HASH_HOLD_OUT_MODULUS = 5
KIND_OF_SHAPE = {
    "and2": "conjunction",
    "or2": "disjunction",
    "xor2": "xor",
    "and3": "conjunction3",
    "or3": "disjunction3",
    "at_least_2": "at_least_2",
    "parity3": "parity3",
    "and_or": "and_or",
}


@dataclass(frozen=True)
class RuleEntry:
    """One named rule of the space: ``shape`` from the table above, ``kind`` the task kind."""

    name: str
    shape: str
    kind: str
    rule: R.Rule


def _literals(positive_only: bool = False) -> list[tuple[str, str, R.Rule]]:
    """(attribute, name part, rule) per literal: every value, and for a 4-valued attribute the
    negation of each value (a binary attribute's negation is its other value)."""
    out = []
    for attribute in ATTRIBUTES:
        for value in VALUES[attribute]:
            out.append((attribute, value, R.Literal(attribute, value)))
        if len(VALUES[attribute]) > 2 and not positive_only:
            for value in VALUES[attribute]:
                out.append((attribute, f"not_{value}", R.Not(R.Literal(attribute, value))))
    return out


def _tuples(literals, n: int):
    for combo in itertools.combinations(literals, n):
        if len({c[0] for c in combo}) == n:  # operands on different attributes
            yield [c[1] for c in combo], [c[2] for c in combo]


def _single_entries() -> list[RuleEntry]:
    out = []
    for _attribute, name, rule in _literals():
        kind = "negation" if name.startswith("not_") else "predicate"
        out.append(RuleEntry(f"is_{name}", "single", kind, rule))
    return out


def _pair_entries() -> list[RuleEntry]:
    out = []
    for (a, b), (ra, rb) in _tuples(_literals(), 2):
        out.append(RuleEntry(f"{a}_and_{b}", "and2", "conjunction", R.And((ra, rb))))
        out.append(RuleEntry(f"{a}_or_{b}", "or2", "disjunction", R.Or((ra, rb))))
    for (a, b), (ra, rb) in _tuples(_literals(positive_only=True), 2):
        out.append(RuleEntry(f"{a}_xor_{b}", "xor2", "xor", R.Xor((ra, rb))))
    return out


def _triple_entries() -> list[RuleEntry]:
    out = []
    for (a, b, c), (ra, rb, rc) in _tuples(_literals(), 3):
        out.append(RuleEntry(f"{a}_and_{b}_and_{c}", "and3", "conjunction3", R.And((ra, rb, rc))))
        out.append(RuleEntry(f"{a}_or_{b}_or_{c}", "or3", "disjunction3", R.Or((ra, rb, rc))))
        out.append(RuleEntry(f"2_of_{a}_{b}_{c}", "at_least_2", "at_least_2", R.AtLeast(2, (ra, rb, rc))))
        for (x, rx), (y, ry), (z, rz) in (((a, ra), (b, rb), (c, rc)), ((a, ra), (c, rc), (b, rb)),
                                          ((b, rb), (c, rc), (a, ra))):  # fmt: skip
            out.append(RuleEntry(f"{x}_and_{y}_or_{z}", "and_or", "and_or", R.Or((R.And((rx, ry)), rz))))
    for (a, b, c), (ra, rb, rc) in _tuples(_literals(positive_only=True), 3):
        out.append(RuleEntry(f"{a}_xor_{b}_xor_{c}", "parity3", "parity3", R.Xor((ra, rb, rc))))
    return out


def canonical(table: np.ndarray) -> bytes:
    """One key for a truth table and its complement (the one whose first row is False)."""
    table = np.asarray(table, dtype=bool).reshape(64)
    return (~table if table[0] else table).tobytes()


def _hash_held(table: np.ndarray) -> bool:
    return zlib.crc32(canonical(table)) % HASH_HOLD_OUT_MODULUS == 0


@cache
def rule_entries() -> tuple[RuleEntry, ...]:
    """Every named rule of the space (duplicated tables included; first name wins in lookups)."""
    return (*_single_entries(), *_pair_entries(), *_triple_entries())


def _is_constant(table: np.ndarray) -> bool:
    return bool(table.all() or not table.any())


@cache
def _trained_keys() -> frozenset[bytes]:
    entries = rule_entries()
    by_name = {e.name: e for e in entries}
    legacy_held = {canonical(R.truth(by_name[n].rule)) for n in LEGACY_HELD_OUT}
    legacy = {canonical(R.truth(e.rule)) for e in entries if e.shape in LEGACY_SHAPES} - legacy_held
    new = set()
    for e in entries:
        if e.shape in NEW_TRAINED_SHAPES:
            table = R.truth(e.rule)
            key = canonical(table)
            if not _is_constant(table) and key not in legacy_held and not _hash_held(table):
                new.add(key)
    return frozenset(legacy | new)


@cache
def _grammar_keys() -> frozenset[bytes]:
    return frozenset(canonical(R.truth(e.rule)) for e in rule_entries())


def in_grammar(table: np.ndarray) -> bool:
    """Whether some rule of the space (trained or not) has this yes/no table or its complement."""
    return canonical(np.asarray(table, dtype=bool)) in _grammar_keys()


def table_of(table_or_rule) -> np.ndarray:
    """The boolean truth table of a rule, a rule's text or a table (bool or yes/no ``(64,)``)."""
    if isinstance(table_or_rule, str):
        table_or_rule = R.parse(table_or_rule)
    if isinstance(table_or_rule, R.Rule):
        return R.truth(table_or_rule)
    table = np.asarray(getattr(table_or_rule, "truth", table_or_rule))
    if table.shape != (64,):
        raise ValueError(f"a truth table has 64 entries, got shape {table.shape}")
    return table.astype(bool)


def trained(table_or_rule) -> bool:
    """Whether training may draw this yes/no table (or its complement): the public hold-out rule.

    Accepts a :mod:`~dpmtv.embedded.rules` rule, its text, a boolean table over ``ALL_CODES`` or a
    predicate task (its ``truth``)."""
    return canonical(table_of(table_or_rule)) in _trained_keys()


@cache
def trained_tables() -> np.ndarray:
    """Every distinct trained truth table (complements listed once), ``(n, 64)`` bool, sorted."""
    keys = sorted(_trained_keys())
    return np.stack([np.frombuffer(k, dtype=bool) for k in keys])
