"""Every install line dpmtv prints works from a source checkout: dpmtv is not on a package index
yet, so `pip install 'dpmtv[EXTRA]'` cannot work; the hints say `pip install -e '.[EXTRA]'` for
an extra that pyproject.toml defines."""

from __future__ import annotations

import re
import sys
from pathlib import Path

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[1]
EXTRAS = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"])


def _hints() -> list[tuple[str, str]]:
    return [
        (f"{path.relative_to(ROOT)}:{number}", line)
        for path in sorted((ROOT / "src" / "dpmtv").rglob("*.py"))
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if "pip install" in line
    ]


def test_no_hint_installs_dpmtv_from_an_index():
    wrong = [f"{where}: {line.strip()}" for where, line in _hints() if "dpmtv[" in line]
    assert not wrong, "dpmtv is not on PyPI: say pip install -e '.[EXTRA]'\n" + "\n".join(wrong)


def test_every_hinted_extra_exists():
    named = {(where, extra) for where, line in _hints() for extra in re.findall(r"'\.\[([\w-]+)\]'", line)}
    assert named, "the hints were not found"
    assert not [hint for hint in named if hint[1] not in EXTRAS], sorted(named)
