"""Release metadata: the licence, the citation file, the version and the changelog agree with each other."""

import sys
from pathlib import Path

import pytest
import yaml

import dpmtv

ROOT = Path(__file__).resolve().parents[1]


def _pyproject() -> dict:
    tomllib = pytest.importorskip("tomllib") if sys.version_info >= (3, 11) else pytest.importorskip("tomli")
    return tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))


def test_pep639_licence_metadata_and_file():
    project = _pyproject()
    assert any(r.startswith("setuptools>=77") for r in project["build-system"]["requires"])
    assert project["project"]["license"] == "Apache-2.0"
    for name in project["project"]["license-files"]:
        text = (ROOT / name).read_text(encoding="utf-8")
        assert "Apache License" in text and "Version 2.0, January 2004" in text
        assert "END OF TERMS AND CONDITIONS" in text  # the full text, not a pointer to it


def test_citation_file_names_the_software_the_paper_and_mtv():
    citation = yaml.safe_load((ROOT / "CITATION.cff").read_text(encoding="utf-8"))
    assert citation["cff-version"] == "1.2.0" and citation["type"] == "software"
    assert "version" in _pyproject()["project"]["dynamic"]  # read from dpmtv._version alone
    assert citation["version"] == dpmtv.__version__
    paper = citation["preferred-citation"]
    assert [a["family-names"] for a in paper["authors"]] == ["Ngong", "Reza", "Near"]
    assert paper["year"] == 2026 and "2603.04894" in paper["identifiers"][0]["value"]
    (mtv,) = citation["references"]
    assert mtv["authors"][0]["family-names"] == "Huang" and mtv["year"] == 2024
    assert "NeurIPS" in mtv["conference"]["name"]


def test_changelog_keeps_unreleased_and_keep_a_changelog_categories():
    lines = (ROOT / "CHANGELOG.md").read_text(encoding="utf-8").splitlines()
    assert lines.count("## [Unreleased]") == 1
    categories = {"Added", "Changed", "Deprecated", "Removed", "Fixed", "Security"}
    level3 = [line[4:] for line in lines if line.startswith("### ")]
    assert level3 and set(level3) <= categories, set(level3) - categories


def test_the_changelog_has_a_section_for_the_current_version():
    text = (ROOT / "CHANGELOG.md").read_text(encoding="utf-8")
    assert f"## [{dpmtv.__version__}] - " in text
