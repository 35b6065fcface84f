"""The package's folders are its map (docs/design.md §6): a short list of modules at the root, and
each wing imports only wings below it, counting every import statement wherever it stands (the
graph of ``tests/test_import_cycles.py``).

A new feature gets a room, not the root: a module added at ``src/dpmtv/`` fails
:func:`test_the_root_holds_only_its_listed_modules` until it is listed here with its reason."""

from __future__ import annotations

from tests.test_import_cycles import SRC, import_graph

ROOT_MODULES = {
    "__init__": "the public API",
    "__main__": "python -m dpmtv",
    "_version": "the one version string",
    "errors": "the error tree every wing raises from",
    "_atomic": "atomic file writes, used by the artifact, the ledger, the CLI and eval alike",
    "_progress": "progress display shared by the build, eval and the demo",
    "_build_time": "the build's start time, shared by the artifact and the ledger",
    "heads": "head sets: the vocabulary of models, forward, selection and the artifact",
    "candidate_lists": "the public candidate head lists, read by selection and the artifact's claim",
    "inference": "answering with a released vector: the library's one call for answer, eval and serve",
}

# Lowest first. A wing may import its own modules and any wing of a lower rank, never a higher one.
WING_RANKS: list[set[str]] = [
    {"_version", "errors", "_atomic", "_progress", "_build_time"},
    {"privacy"},
    {"data", "models", "testing", "heads", "candidate_lists", "ledger"},
    {"forward", "artifact"},
    {"selection", "distributed", "inference"},
    {"pipeline"},
    {"audit", "eval", "embedded", "serve"},
    {"demo"},
    {"cli", "__main__", "__init__"},
]


def _wing(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def _rank(wing: str) -> int:
    for rank, wings in enumerate(WING_RANKS):
        if wing in wings:
            return rank
    raise AssertionError(f"the wing {wing!r} has no rank in WING_RANKS: give it one")


def upward_imports(graph: dict[str, set[str]]) -> list[tuple[str, str]]:
    """(importer, imported) pairs where the importer's wing ranks below the imported one's."""
    return sorted(
        (module, target)
        for module, targets in graph.items()
        for target in targets
        if _wing(module) != _wing(target) and _rank(_wing(module)) < _rank(_wing(target))
    )


def test_the_root_holds_only_its_listed_modules():
    found = {path.stem for path in SRC.glob("*.py")}
    assert found - set(ROOT_MODULES) == set(), "new root modules: give them a room under a wing"
    assert set(ROOT_MODULES) - found == set(), "listed root modules that no longer exist: unlist them"
    assert len(ROOT_MODULES) <= 10


def test_every_wing_has_a_rank():
    for wing in {_wing(module) for module in import_graph()}:
        _rank(wing)


def test_no_wing_imports_a_higher_one():
    climbs = upward_imports(import_graph())
    assert not climbs, "imports into a higher wing: " + ", ".join(f"{a} -> {b}" for a, b in climbs)


def test_privacy_imports_no_model_or_forward_code():
    graph = import_graph()
    for module, targets in graph.items():
        if _wing(module) == "privacy":
            assert not {_wing(t) for t in targets} - {"privacy", "errors"}, module


def test_the_artifact_imports_no_forward_code():
    """The released file is read without torch: inference turns it into the hooks' patches."""
    graph = import_graph()
    for module, targets in graph.items():
        if _wing(module) == "artifact":
            assert "forward" not in {_wing(t) for t in targets}, module


def test_the_check_sees_an_upward_import():
    graph = {"dpmtv.models.embedded": {"dpmtv.embedded.suite"}, "dpmtv.embedded.suite": set()}
    assert upward_imports(graph) == [("dpmtv.models.embedded", "dpmtv.embedded.suite")]
