"""Rules over the embedded world's attributes: a tiny expression language and its truth tables.

A rule is a boolean function of one image's four attributes (:data:`~dpmtv.embedded.world.VALUES`);
its *truth table* is its value on each of the 64 rows of :data:`~dpmtv.embedded.world.ALL_CODES`.
Grammar of :func:`parse` (lowest precedence first, all operators left-associative)::

    rule   := xor ("or" xor)*
    xor    := conj ("xor" conj)*
    conj   := unary ("and" unary)*
    unary  := "not" unary | atom
    atom   := "(" rule ")" | VALUE | ATTRIBUTE "=" VALUE | "at least" K "of" "(" rule ("," rule)* ")"

``VALUE`` is any attribute value (``red``, ``circle``, ``big``, ``left``, ...), ``colour=red`` names
the attribute explicitly; ``at least 2 of (red, circle, big)`` is k-of-n. ``Literal``, ``Not``,
``And``, ``Or``, ``Xor`` and ``AtLeast`` are frozen dataclasses; :func:`truth` evaluates them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from dpmtv.embedded.world import ALL_CODES, ATTR_POS, ATTRIBUTES, VALUES
from dpmtv.errors import ParameterError

_VALUE_ATTRIBUTE = {value: attribute for attribute in ATTRIBUTES for value in VALUES[attribute]}


@dataclass(frozen=True)
class Literal:
    attribute: str
    value: str

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True)
class Not:
    operand: Rule

    def __str__(self) -> str:
        return f"not {_wrap(self.operand)}"


@dataclass(frozen=True)
class And:
    operands: tuple[Rule, ...]

    def __str__(self) -> str:
        return " and ".join(_wrap(o) for o in self.operands)


@dataclass(frozen=True)
class Or:
    operands: tuple[Rule, ...]

    def __str__(self) -> str:
        return " or ".join(_wrap(o) for o in self.operands)


@dataclass(frozen=True)
class Xor:
    operands: tuple[Rule, ...]

    def __str__(self) -> str:
        return " xor ".join(_wrap(o) for o in self.operands)


@dataclass(frozen=True)
class AtLeast:
    """At least ``k`` of ``operands`` hold (k-of-n)."""

    k: int
    operands: tuple[Rule, ...]

    def __str__(self) -> str:
        return f"at least {self.k} of ({', '.join(str(o) for o in self.operands)})"


Rule = Literal | Not | And | Or | Xor | AtLeast


def _wrap(rule: Rule) -> str:
    return str(rule) if isinstance(rule, Literal | Not) else f"({rule})"


def truth(rule: Rule) -> np.ndarray:
    """The rule's boolean truth table over the 64 rows of ``ALL_CODES``."""
    if isinstance(rule, Literal):
        return ALL_CODES[:, ATTR_POS[rule.attribute]] == VALUES[rule.attribute].index(rule.value)
    if isinstance(rule, Not):
        return ~truth(rule.operand)
    tables = np.stack([truth(o) for o in rule.operands])
    if isinstance(rule, And):
        return tables.all(0)
    if isinstance(rule, Or):
        return tables.any(0)
    if isinstance(rule, Xor):
        return tables.sum(0) % 2 == 1
    return tables.sum(0) >= rule.k


# --------------------------------------------------------------------------------------------
# parsing
# --------------------------------------------------------------------------------------------
_TOKEN = re.compile(r"\s*(\(|\)|=|,|[0-9]+|[A-Za-z_]+)")


def _tokens(text: str) -> list[str]:
    out, pos = [], 0
    text = text.rstrip()
    while pos < len(text):
        match = _TOKEN.match(text, pos)
        if match is None:
            raise ParameterError(f"rule {text!r}: unexpected character {text[pos:].strip()[0]!r} at {pos}")
        out.append(match.group(1).lower())
        pos = match.end()
    return out


class _Parser:
    def __init__(self, text: str):
        self.text, self.tokens, self.i = text, _tokens(text), 0

    def peek(self) -> str | None:
        return self.tokens[self.i] if self.i < len(self.tokens) else None

    def take(self) -> str:
        token = self.peek()
        if token is None:
            raise self.error("the rule ends too early")
        self.i += 1
        return token

    def error(self, why: str) -> ParameterError:
        values = ", ".join(v for a in ATTRIBUTES for v in VALUES[a])
        return ParameterError(
            f"rule {self.text!r}: {why}; use values ({values}), attribute=value, not, and, or, xor, ( )"
        )

    def binary(self, word: str, below, node):
        operands = [below()]
        while self.peek() == word:
            self.take()
            operands.append(below())
        return operands[0] if len(operands) == 1 else node(tuple(operands))

    def rule(self) -> Rule:
        return self.binary("or", self.xor, Or)

    def xor(self) -> Rule:
        return self.binary("xor", self.conj, Xor)

    def conj(self) -> Rule:
        return self.binary("and", self.unary, And)

    def unary(self) -> Rule:
        if self.peek() == "not":
            self.take()
            return Not(self.unary())
        return self.atom()

    def atom(self) -> Rule:
        token = self.take()
        if token == "at":
            return self.at_least()
        if token == "(":
            inner = self.rule()
            if self.peek() != ")":
                raise self.error("a '(' is not closed")
            self.take()
            return inner
        if self.peek() == "=":
            self.take()
            value = self.take()
            if token not in VALUES or value not in VALUES[token]:
                raise self.error(f"unknown attribute or value {token}={value}")
            return Literal(token, value)
        if token not in _VALUE_ATTRIBUTE:
            raise self.error(f"unknown word {token!r}")
        return Literal(_VALUE_ATTRIBUTE[token], token)

    def at_least(self) -> AtLeast:
        """``at least K of (rule, rule, ...)`` after the word ``at``."""
        words = [self.take(), self.take(), self.take(), self.take()]
        if words[0] != "least" or not words[1].isdigit() or words[2:] != ["of", "("]:
            raise self.error("write k-of-n as 'at least K of (a, b, c)'")
        operands = [self.rule()]
        while self.peek() == ",":
            self.take()
            operands.append(self.rule())
        if self.take() != ")":
            raise self.error("a '(' is not closed")
        return AtLeast(int(words[1]), tuple(operands))


def parse(text: str) -> Rule:
    """Parse a rule such as ``"big and not (red or left)"`` (grammar in the module docstring)."""
    parser = _Parser(text)
    if not parser.tokens:
        raise parser.error("the rule is empty")
    rule = parser.rule()
    if parser.peek() is not None:
        raise parser.error(f"unexpected {parser.peek()!r} after a complete rule")
    return rule
