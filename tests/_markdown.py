"""Checks that every Markdown table of a report parses: the header, the separator and each row
have the same number of cells (a ``\\|`` inside a cell does not split it)."""

from __future__ import annotations

import re

_CELL_SPLIT = re.compile(r"(?<!\\)\|")
_SEPARATOR_CELL = re.compile(r"^\s*:?-{3,}:?\s*$")


def _cells(line: str) -> list[str]:
    return _CELL_SPLIT.split(line.strip().removeprefix("|").removesuffix("|"))


def markdown_tables(text: str) -> list[list[str]]:
    """Each table of ``text`` as its lines (runs of consecutive lines that start with ``|``)."""
    tables, current = [], []
    for line in [*text.splitlines(), ""]:
        if line.lstrip().startswith("|"):
            current.append(line)
        elif current:
            tables.append(current)
            current = []
    return tables


def assert_tables_valid(text: str, *, expect_tables: bool = True) -> int:
    """Every table has a separator line second and as many cells in every line as in its header;
    returns the number of tables."""
    tables = markdown_tables(text)
    assert tables or not expect_tables, "no Markdown table found"
    for lines in tables:
        assert len(lines) >= 2, f"a table without its separator line: {lines}"
        header, separator, *rows = (_cells(line) for line in lines)
        assert all(_SEPARATOR_CELL.match(cell) for cell in separator), f"not a separator: {lines[1]}"
        for line, cells in zip(lines, [header, separator, *rows], strict=True):
            assert len(cells) == len(header), f"{len(cells)} cells under a header of {len(header)}: {line}"
    return len(tables)


#: A dash standing for a missing value ("| — |", "and — of MTV's"): one between spaces, bars or
#: brackets; a list item's leading "- " and ranges such as "0.36–0.37" are not.
BARE_DASH = re.compile(r"(?<=[ |(])[—–-](?=[ |)]|$)", flags=re.MULTILINE)
