"""The source speaks of the code, not of its history: no module under ``src/`` cites an issue or a
section of a spec. A docstring says what the code does and points to docs/design.md for the why
(``docs/design.md §3`` is fine: users read that design)."""

from __future__ import annotations

import re
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src" / "dpmtv"

CITATIONS = re.compile(
    r"\bissues?\s*#?\s*\d+"  # issue 28, issues 25, issue #7
    r"|\bgh-\d+"  # gh-12
    r"|\bspec(?:ification)?(?:\.md)?\s*§"  # SPEC §4, spec.md §2
    r"|\bspec(?:ification)?\s+sections?\s+\d",  # spec section 4
    re.IGNORECASE,
)


def citations(text: str) -> list[str]:
    return [match.group(0) for match in CITATIONS.finditer(text)]


def test_no_module_cites_an_issue_or_a_spec_section():
    found = [
        f"{path.relative_to(SRC.parent)}:{number}: {hit}"
        for path in sorted(SRC.rglob("*.py"))
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1)
        for hit in citations(line)
    ]
    assert not found, "cite docs/design.md, not issues or spec sections:\n" + "\n".join(found)


def test_the_check_sees_citations_and_spares_the_design():
    assert citations("(issue 28; see Issue #7, gh-3)") == ["issue 28", "Issue #7", "gh-3"]
    assert citations("SPEC §4 and spec.md § 2, spec section 3") == ["SPEC §", "spec.md §", "spec section 3"]
    assert citations("docs/design.md §3, RFC 9113 §3, the issued vector") == []
