"""scripts/family_table.py: the README table comes from the registry and JUnit results."""

import importlib.util
from pathlib import Path

SCRIPT = Path(__file__).parents[2] / "scripts" / "family_table.py"
JUNIT = """<testsuites><testsuite>
<testcase classname="tests.models.test_gemma3.TestGemma3Adapter" name="test_sites_resolve_one_per_layer"/>
<testcase classname="tests.models.test_llava.TestLlavaAdapter" name="test_sites_resolve_one_per_layer">
<failure message="boom"/></testcase>
<testcase classname="tests.models.test_registry"
 name="test_refused_families_raise_with_their_reason[florence2]"/>
<testcase classname="tests.models.test_remote_code.TestVilaStyleSpec"
 name="test_sites_resolve_one_per_layer"/>
</testsuite></testsuites>"""


def _script():
    spec = importlib.util.spec_from_file_location("family_table", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_table_rows_come_from_registry_and_results(tmp_path):
    (tmp_path / "r.xml").write_text(JUNIT)
    readme = tmp_path / "README.md"
    readme.write_text("intro\n<!-- family-table:start -->\nold\n<!-- family-table:end -->\nrest\n")
    assert _script().main(["--junit", str(tmp_path / "r.xml"), "--readme", str(readme)]) == 0
    text = readme.read_text()
    assert "old" not in text and text.startswith("intro\n") and text.endswith("rest\n")
    assert "| Gemma 3 | `gemma3` | generic |" in text and "contract passed (1) |" in text
    llava = "| LLaVA | `llava` | generic | sites and geometry discovered; own chat template |"
    assert llava + " **FAILED** (1 of 1) |" in text
    assert "| florence2 | `florence2` | refused | an encoder-decoder generator" in text
    assert "refusal tested (1)" in text and "| VILA (remote code) |" in text
    assert "| Qwen2-VL | `qwen2_vl` | special-cased | image-only processor" in text and "not run" in text
