"""One results tree: ``benchmarks/results/INDEX.md`` lists every result file, under
``benchmarks/results/`` and in the result folders the docs site shows (which stay under ``docs/``:
MkDocs shows only files there), each with the command that made it and the page that cites it."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
INDEX = REPO / "benchmarks" / "results" / "INDEX.md"
DOCS_RESULT_FOLDERS = (
    "demo",
    "demo-full",
    "demo-n512-s4",
    "demo-shared-heads",
    "eval-embedded-is_big",
    "eval-embedded-is_big-queries",
    "eval-embedded-is_big-shared-heads",
    "membership",
    "adapters",
    "serve",
)
PREFIXES = ("benchmarks/results/", *(f"docs/{folder}/" for folder in DOCS_RESULT_FOLDERS))


def result_files() -> set[str]:
    roots = [REPO / prefix for prefix in PREFIXES]
    found = {path for root in roots for path in root.rglob("*") if path.is_file()}
    return {path.relative_to(REPO).as_posix() for path in found} - {"benchmarks/results/INDEX.md"}


def listed_files(text: str) -> set[str]:
    """The result paths the index names: each `path` in backticks under a results root."""
    names = re.findall(r"`([^`\s]+)`", text)
    return {name for name in names if name.startswith(PREFIXES) and not name.endswith("/")}


def test_every_result_file_is_listed():
    missing = sorted(result_files() - listed_files(INDEX.read_text(encoding="utf-8")))
    assert not missing, "add to benchmarks/results/INDEX.md (command and claim): " + ", ".join(missing)


def test_every_listed_file_exists():
    gone = sorted(listed_files(INDEX.read_text(encoding="utf-8")) - result_files())
    assert not gone, "listed in benchmarks/results/INDEX.md but missing: " + ", ".join(gone)


def test_every_docs_result_folder_exists():
    assert all((REPO / "docs" / folder).is_dir() for folder in DOCS_RESULT_FOLDERS)


def test_the_check_reads_paths_not_commands():
    text = "- `docs/demo/report.md`: `python x.py --out benchmarks/results/a.json`; `docs/demo/`"
    assert listed_files(text) == {"docs/demo/report.md"}
