"""Markdown tables that parse: every row has as many cells as the header.

A report's table used to print a header of three cells over a separator of two (an empty list of
columns joined into one empty cell), which Markdown renders as text. Building every table here
makes that impossible: cells are a list each, joined in one place, and a ``|`` inside a cell is
escaped so it cannot split it.
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["markdown_table"]


def markdown_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    """The lines of a GitHub-flavoured Markdown table; ``ValueError`` if a row's cell count is
    not the header's."""
    width = len(header)
    for row in rows:
        if len(row) != width:
            raise ValueError(f"a table row has {len(row)} cells under a header of {width}: {list(row)}")
    return [_line(header), "|" + "---|" * width, *(_line(row) for row in rows)]


def _line(cells: Sequence[str]) -> str:
    return "| " + " | ".join(str(cell).replace("|", "\\|") for cell in cells) + " |"
