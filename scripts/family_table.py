"""Write the docs' model-family table from the adapter registry and the test results.

    pytest tests/models -p no:randomly --junitxml=build/families.xml
    python scripts/family_table.py --junit build/families.xml   # rewrites docs/reference/families.md

Rows: every ``model_type`` transformers maps to ``AutoModelForImageTextToText`` plus every type
the registry knows. The contract column is read from the JUnit file (one test module per family,
``tests/models/test_<model_type>.py``), never written by hand.
"""

from __future__ import annotations

import argparse
import sys
import xml.etree.ElementTree as ET
from collections import defaultdict
from pathlib import Path

from transformers.models.auto.modeling_auto import MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES

from dpmtv.models.registry import PROCESSOR_NEEDS_TORCHVISION, family_entry, known_model_types

REFUSAL_TEST = "test_refused_families_raise_with_their_reason"
START, END = "<!-- family-table:start -->", "<!-- family-table:end -->"
REMOTE_CODE = {  # test class -> (row name, spec file shipped in docs/adapters)
    "TestQwenVLStyleSpec": ("Qwen-VL (remote code)", "docs/adapters/qwen-vl-chat.json"),
    "TestVilaStyleSpec": ("VILA (remote code)", "docs/adapters/vila.json"),
}


def read_results(junit: Path) -> dict[str, dict[str, int]]:
    """{test module or remote-code class: {"passed": n, "failed": n, "skipped": n}}."""
    counts: dict[str, dict[str, int]] = defaultdict(lambda: {"passed": 0, "failed": 0, "skipped": 0})
    for case in ET.parse(junit).iter("testcase"):
        module, _, cls = case.get("classname", "").rpartition(".")
        key = cls if cls in REMOTE_CODE else module.rpartition(".")[2]
        if cls.startswith("test_"):  # module-level test functions: the classname ends in the module
            key = cls
        name = case.get("name", "")
        if name.startswith(REFUSAL_TEST + "["):  # the registry's refusal test, one case per model_type
            key = "test_" + name[len(REFUSAL_TEST) + 1 : -1]
        outcome = "passed"
        if case.find("failure") is not None or case.find("error") is not None:
            outcome = "failed"
        elif case.find("skipped") is not None:
            outcome = "skipped"
        counts[key][outcome] += 1
    return counts


def contract_cell(model_type: str, counts: dict[str, int] | None) -> str:
    if counts is None:
        return "not run"
    passed, failed = counts["passed"], counts["failed"]
    if failed:
        return f"**FAILED** ({failed} of {passed + failed})"
    if model_type in PROCESSOR_NEEDS_TORCHVISION:
        return f"processor-free checks passed ({passed}); {PROCESSOR_NEEDS_TORCHVISION[model_type]}"
    if family_entry(model_type).status == "refused":
        return f"refusal tested ({passed})"
    return f"contract passed ({passed})"


def render(results: dict[str, dict[str, int]]) -> str:
    types = sorted(set(MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES) | set(known_model_types()))
    rows = [
        "| family | `model_type` | adapter | why | contract on tiny random weights |",
        "|---|---|---|---|---|",
    ]
    untested = []
    for model_type in types:
        entry = family_entry(model_type)
        if entry.status == "untested":
            untested.append(f"`{model_type}`")
            continue
        why = (
            entry.reason if entry.status != "generic" else "sites and geometry discovered; own chat template"
        )
        cell = contract_cell(model_type, results.get(f"test_{model_type}"))
        rows.append(f"| {entry.display_name} | `{model_type}` | {entry.status} | {why} | {cell} |")
    for test_class, (name, spec) in REMOTE_CODE.items():
        counts = results.get(test_class)
        cell = (
            "not run"
            if counts is None
            else contract_cell("", counts).replace("contract passed", "contract passed (style fixture)")
        )
        rows.append(
            f"| {name} | — | spec `{spec}` | remote code: `--model-spec` + `--trust-remote-code` | {cell} |"
        )
    note = (
        f"\nNot yet tested ({len(untested)}; generic discovery is attempted at load, and a failing step "
        f"is a clear refusal; `build`, `answer` and `inspect` warn): {', '.join(untested)}.\n"
    )
    return "\n".join(rows) + "\n" + note + _variants_note(results)


VARIANTS = {  # test module -> what it runs, on the tiny LLaVA
    "test_loaded_models": (
        "Loading variants on the tiny LLaVA: a user-constructed model + processor, a torchao int8 "
        "weight-only checkpoint (build, answer, fingerprint), a PEFT LoRA adapter, a hub revision, "
        "an attention implementation"
    ),
    "test_processor_fallbacks": (
        "Processor fallbacks: the tokenizer's chat template, then the generic format; processor "
        "load/encode errors as one line; the torchvision hint; Fuyu's single-image refusal"
    ),
}


def _variants_note(results: dict[str, dict[str, int]]) -> str:
    lines = []
    for module, what in VARIANTS.items():
        counts = results.get(module)
        cell = "not run" if counts is None else contract_cell("", counts).replace("contract passed", "passed")
        lines.append(f"{what}: {cell}.\n")
    return "\n" + "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--junit",
        type=Path,
        action="append",
        required=True,
        help="pytest --junitxml output of tests/models (repeatable; later files win)",
    )
    parser.add_argument("--readme", type=Path, default=Path("docs/reference/families.md"))
    args = parser.parse_args(argv)
    text = args.readme.read_text(encoding="utf-8")
    if START not in text or END not in text:
        print(f"{args.readme}: no {START} ... {END} block to replace", file=sys.stderr)
        return 2
    head, rest = text.split(START, 1)
    tail = rest.split(END, 1)[1]
    generated = f"{START}\n<!-- generated by scripts/family_table.py; do not edit by hand -->\n"
    args.readme.write_text(
        head
        + generated
        + render({key: value for junit in args.junit for key, value in read_results(junit).items()})
        + END
        + tail,
        encoding="utf-8",
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
