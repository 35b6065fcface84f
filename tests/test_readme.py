"""Every README code block that a user would copy runs: the Python blocks, and the quickstart's
`dpmtv` commands, against a tiny random-weight checkpoint standing in for the user's folder."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest
from click.testing import CliRunner
from PIL import Image

from dpmtv.cli import main

README = Path(__file__).resolve().parents[1] / "README.md"
USER_CHECKPOINT = "/models/Qwen2-VL-2B-Instruct"
# the README's head range is for that 28-layer model; the tiny stand-in has 2 layers
STAND_INS = {USER_CHECKPOINT: None, "layers:8-15": "layers:0-1"}


def _blocks(language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", README.read_text(encoding="utf-8"), flags=re.S)


def _dpmtv_commands() -> list[list[str]]:
    """Each `dpmtv ...` command of the bash blocks (continuation lines joined, comments and
    elided examples with `...` dropped), except the two set-up commands."""
    commands = []
    for block in _blocks("bash"):
        for line in block.replace("\\\n", " ").splitlines():
            line = line.split("  #")[0].strip()
            if line.startswith("dpmtv ") and "..." not in line:
                commands.append(shlex.split(line)[1:])
    return commands


@pytest.fixture
def user_folder(tmp_path, tiny_llava_path, monkeypatch):
    """The working folder the README's paths are relative to, with the user's files in it."""
    from tests.conftest import write_records

    write_records(tmp_path / "private", 24)
    write_records(tmp_path / "public", 16, seed=1)  # for `dpmtv select`
    write_records(tmp_path / "test", 8, seed=2)  # for `dpmtv eval`
    Image.new("RGB", (20, 20), (9, 9, 9)).save(tmp_path / "query.png")
    monkeypatch.chdir(tmp_path)
    return tmp_path


def _localise(text: str, tiny_path: Path) -> str:
    for original, stand_in in STAND_INS.items():
        text = text.replace(original, stand_in or str(tiny_path))
    return text


def test_the_readme_has_quickstart_commands_and_python():
    assert len(_dpmtv_commands()) >= 3 and _blocks("python")


def test_quickstart_commands_then_python_blocks_run(user_folder, tiny_llava_path):
    runner = CliRunner()
    for args in _dpmtv_commands():
        if args[0] in {"demo", "serve"}:
            continue  # the demo has its own test; serving has its own tests
        args = [_localise(arg, tiny_llava_path) for arg in args]
        result = runner.invoke(main, args)
        assert result.exit_code == 0, f"dpmtv {' '.join(args)}\n{result.output}"
    assert (user_folder / "task.safetensors").exists()
    for block in _blocks("python"):
        if "OpenAI(" in block:
            continue  # a client of a running `dpmtv serve`: tests/serve/test_openai_client.py
        exec(compile(_localise(block, tiny_llava_path), "README.md", "exec"), {})


def test_the_readme_is_short_and_starts_with_the_user():
    """At most 200 lines, the quickstart on the user's own checkpoint before line 80."""
    lines = README.read_text(encoding="utf-8").splitlines()
    quickstart = next(number for number, line in enumerate(lines, 1) if line.startswith("## Quickstart"))
    assert len(lines) <= 200 and quickstart < 80


def test_the_readme_test_command_is_what_ci_runs():
    """The second of the two commands is, character for character, the first line .ci/run runs."""
    ci_run = README.parent / ".ci" / "run"
    first = next(
        line for line in ci_run.read_text().splitlines() if line and not line.startswith(("#", "set ", "cd "))
    )
    assert first in [line.strip() for block in _blocks("bash") for line in block.splitlines()]
