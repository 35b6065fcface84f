"""Commands that run no model start without torch and transformers (docs/design.md §13, start-up);
``--help`` also without the accounting stack (dp_accounting imports scipy: ~1 s of CPU); one that
runs the model imports torch after the CLI chose OpenMP's wait policy.

Each command runs in a fresh interpreter through the real click entry point; the test reads that
interpreter's ``sys.modules`` after the command returned.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from click.testing import CliRunner

from dpmtv.cli import main

PROBE = """
import json, sys
from dpmtv.cli import main
try:
    main(sys.argv[1:], prog_name="dpmtv")
except SystemExit as stop:
    code = stop.code
else:
    code = 0
heavy = [m for m in ("torch", "transformers", "scipy", "dp_accounting") if m in sys.modules]
print(json.dumps({"code": code, "heavy": heavy}), file=sys.stderr)
"""

SUBCOMMANDS = (
    "answer",
    "attack",
    "audit",
    "budget",
    "build",
    "demo",
    "eval",
    "inspect",
    "plan",
    "select",
    "serve",
)


MODEL_STACK = ("torch", "transformers")


def _imported_after(*args: str) -> list[str]:
    """Which of torch, transformers, scipy and dp_accounting the command imported."""
    done = subprocess.run([sys.executable, "-c", PROBE, *args], capture_output=True, text=True, timeout=120)
    report = json.loads(done.stderr.strip().splitlines()[-1])
    assert report["code"] in (0, None), done.stdout + done.stderr
    return report["heavy"]


def _heavy_modules_after(*args: str) -> list[str]:
    return [m for m in _imported_after(*args) if m in MODEL_STACK]


def test_top_level_help_imports_no_model_or_accounting_stack():
    assert _imported_after("--help") == []


@pytest.mark.parametrize("name", SUBCOMMANDS)
def test_every_subcommand_help_imports_no_model_or_accounting_stack(name):
    assert _imported_after(name, "--help") == []


def test_inspect_plan_and_budget_import_no_model_stack(tiny_llava_path, records_file, tmp_path):
    out, ledger = tmp_path / "t.safetensors", tmp_path / "ledger.db"
    common = ["--model", str(tiny_llava_path), "--heads", "layers:0", "--epsilon", "1", "--delta", "1e-5"]
    common += ["--l2-clip-norm", "1.5", "--shots-per-chunk", "4"]
    build = ["build", *common, "--data", str(records_file), "--out", str(out), "--quiet"]
    built = CliRunner().invoke(main, build)
    assert built.exit_code == 0, built.output
    assert _heavy_modules_after("inspect", str(out)) == []
    assert _heavy_modules_after("inspect", str(out), "--json") == []
    assert _heavy_modules_after("plan", *common, "--num-records", "24") == []
    embedded = ["--model", "embedded", "--heads", "all", "--epsilon", "1", "--num-records", "64"]
    assert _heavy_modules_after("plan", *embedded) == []
    init = ["init", "d", "--epsilon", "2", "--delta", "1e-5", "--ledger", str(ledger)]
    assert _heavy_modules_after("budget", *init) == []
    assert _heavy_modules_after("budget", "show", "--ledger", str(ledger)) == []
    assert _heavy_modules_after("budget", "show", "d", "--ledger", str(ledger)) == []


TORCH_SEES = """
import os, sys
seen = []
def hook(event, args):
    if event == "import" and args[0] == "torch" and not seen:
        seen.append(os.environ.get("OMP_WAIT_POLICY"))
sys.addaudithook(hook)
from dpmtv.cli import main
try:
    main(sys.argv[1:], prog_name="dpmtv")
except SystemExit as stop:
    assert stop.code in (0, None), stop.code
print("torch saw", seen, file=sys.stderr)
"""


@pytest.mark.parametrize("users_policy", [None, "ACTIVE"])
def test_torch_loads_openmp_with_idle_threads_asleep_unless_the_user_chose(
    users_policy, tiny_llava_path, records_file, tmp_path, monkeypatch
):
    """A command that runs the model imports torch after the CLI set OMP_WAIT_POLICY=PASSIVE
    (OpenMP reads it once, at load); a policy the user set is kept."""
    monkeypatch.delenv("OMP_WAIT_POLICY", raising=False)
    if users_policy is not None:
        monkeypatch.setenv("OMP_WAIT_POLICY", users_policy)
    build = ["build", "--model", str(tiny_llava_path), "--heads", "layers:0", "--epsilon", "1"]
    build += ["--l2-clip-norm", "1.5", "--shots-per-chunk", "4", "--data", str(records_file)]
    build += ["--out", str(tmp_path / "t.safetensors"), "--quiet"]
    probe = [sys.executable, "-c", TORCH_SEES, *build]
    done = subprocess.run(probe, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stderr.strip().splitlines()[-1] == f"torch saw [{(users_policy or 'PASSIVE')!r}]"


def test_the_cli_defaults_repeat_the_privacy_maths_constants():
    """``dpmtv.pipeline.defaults`` repeats constants that ``--help`` cannot import from
    ``dpmtv.privacy`` (it loads dp-accounting); they must stay equal."""
    from dpmtv.pipeline import defaults
    from dpmtv.pipeline.settings import PrivateClipSettings
    from dpmtv.privacy import clip_quantile

    assert defaults.CLIP_UTILITIES == clip_quantile.CLIP_UTILITIES
    assert defaults.DEFAULT_CLIP_QUANTILE == clip_quantile.DEFAULT_CLIP_QUANTILE
    clip = PrivateClipSettings()
    assert (clip.epsilon_fraction, clip.utility, clip.tolerance) == (
        defaults.DEFAULT_CLIP_EPSILON_FRACTION,
        defaults.DEFAULT_CLIP_UTILITY,
        defaults.DEFAULT_CLIP_TOLERANCE,
    )
