"""No climb back into the pipeline: no module that ``dpmtv.pipeline`` imports, directly or through
others (extract, executor, hooks, heads, selection, privacy, models, data, prompts, ...), imports
``dpmtv.pipeline`` — counting every import statement wherever it stands, as
``tests/test_import_cycles.py`` does. A step below the pipeline gets what it needs as arguments
(or as a task object it is handed, like the executor's chunk tasks) instead of reaching back up;
an import up would not always close a cycle (``extract`` importing ``pipeline.settings`` would
not), so the cycle test alone does not keep it out."""

from __future__ import annotations

from tests.test_import_cycles import import_graph

PIPELINE = "dpmtv.pipeline"


def _inside(graph: dict[str, set[str]], wing: str) -> set[str]:
    return {module for module in graph if module == wing or module.startswith(wing + ".")}


def modules_below(graph: dict[str, set[str]], wing: str) -> set[str]:
    """The modules outside ``wing`` that the wing imports, directly or through others."""
    inside, below = _inside(graph, wing), set()
    todo = sorted(inside)
    while todo:
        for child in graph[todo.pop()]:
            if child not in inside and child not in below:
                below.add(child)
                todo.append(child)
    return below


def climbs_into(graph: dict[str, set[str]], wing: str) -> list[tuple[str, str]]:
    """(module below the wing, wing module it imports), sorted."""
    inside = _inside(graph, wing)
    below = modules_below(graph, wing)
    return sorted((module, target) for module in below for target in graph[module] & inside)


def test_no_module_below_the_pipeline_imports_it():
    graph = import_graph()
    below = modules_below(graph, PIPELINE)
    # the set is computed, not listed; these must be in it, or the check would be vacuous
    assert {
        "dpmtv.forward.extract",
        "dpmtv.forward.executor",
        "dpmtv.forward.hooks",
        "dpmtv.heads",
        "dpmtv.data.prompts",
    } <= below
    assert {"dpmtv.selection.private", "dpmtv.privacy.release", "dpmtv.data.records"} <= below
    climbs = climbs_into(graph, PIPELINE)
    assert not climbs, "imports back up into the pipeline: " + ", ".join(f"{a} -> {b}" for a, b in climbs)


def test_the_check_sees_a_climb_hidden_in_a_function(tmp_path):
    package = tmp_path / "pkg"
    (package / "wing").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "wing" / "__init__.py").write_text("")
    (package / "wing" / "a.py").write_text("from pkg import low\n")
    (package / "wing" / "b.py").write_text("X = 1\n")
    (package / "low.py").write_text("from pkg import lower\n")
    (package / "lower.py").write_text("def f():\n    from pkg.wing.b import X  # hidden, and no cycle\n")
    (package / "apart.py").write_text("from pkg.wing import a\n")  # above the wing: allowed
    graph = import_graph(package)
    assert modules_below(graph, "pkg.wing") == {"pkg.low", "pkg.lower"}
    assert climbs_into(graph, "pkg.wing") == [("pkg.lower", "pkg.wing.b")]
    (package / "lower.py").write_text("def f():\n    return 1\n")
    assert climbs_into(import_graph(package), "pkg.wing") == []
