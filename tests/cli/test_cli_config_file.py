"""``--config FILE`` / ``--print-config`` on every command that has them: a round trip, order
independence, and config files that are refused in one ``error:`` line naming file, key and value."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from dpmtv.cli import main

COMMANDS = ("build", "serve", "eval", "demo")


@pytest.mark.parametrize("name", COMMANDS)
def test_print_config_reads_back_and_a_config_fills_the_printed_values(name, tmp_path):
    printed = CliRunner().invoke(main, [name, "--print-config"])
    assert printed.exit_code == 0, printed.output
    assert printed.stdout.startswith(f"# dpmtv {name} --config FILE")
    config = tmp_path / f"{name}.toml"
    config.write_text(printed.stdout.replace('dtype = "float32"', 'dtype = "bfloat16"'), encoding="utf-8")
    again = CliRunner().invoke(main, [name, "--config", str(config), "--print-config"])
    assert again.exit_code == 0, again.output
    expected = printed.stdout if name == "demo" else printed.stdout.replace('"float32"', '"bfloat16"')
    assert again.stdout == expected


@pytest.mark.parametrize("name", COMMANDS)
def test_print_config_before_config_prints_the_configs_values(name, tmp_path):
    """The help promises the --config's values; its place on the command line does not matter."""
    config = tmp_path / "c.toml"
    config.write_text('out = "from-the-file"\n' if name == "demo" else 'model = "from-the-file"\n')
    before = CliRunner().invoke(main, [name, "--print-config", "--config", str(config)])
    after = CliRunner().invoke(main, [name, "--config", str(config), "--print-config"])
    assert before.exit_code == after.exit_code == 0, before.output
    assert '= "from-the-file"' in before.stdout and before.stdout == after.stdout


def _refusal(tmp_path, text: str | bytes, *args: str) -> str:
    config = tmp_path / "build.toml"
    config.write_bytes(text if isinstance(text, bytes) else text.encode("utf-8"))
    result = CliRunner().invoke(main, ["build", "--config", str(config), *args])
    assert result.exit_code == 2, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: '{config}'"), result.stderr
    return lines[0]


def test_a_config_file_that_is_not_utf8_is_one_error_line(tmp_path):
    line = _refusal(tmp_path, 'out = "caf\xe9.safetensors"\n'.encode("latin-1"))
    assert "is not UTF-8 text (byte 0xe9" in line


@pytest.mark.parametrize(
    "text, words",
    [
        ("epsilon = [1.0]", "key 'epsilon' = [1.0] is a list; expected a number"),
        ("epsilon = {value = 1.0}", "key 'epsilon' = {\"value\": 1.0} is a table; expected a number"),
        ("epsilon = 1979-05-27", "key 'epsilon' = 1979-05-27 is a date or time; expected a number"),
        ("out = 3", "key 'out' = 3: expected a path in quotes"),
        ("epsilon = true", "key 'epsilon' = true: expected a number"),
        ("shots-per-chunk = 4.7", "key 'shots-per-chunk' = 4.7: expected a whole number"),
        ("quiet = 1", "key 'quiet' = 1: expected true or false"),
        ('select-method = "best"', "key 'select-method' = \"best\": 'best' is not one of"),
        ("epsilom = 1.0", "'epsilom' is not an option of dpmtv build"),
    ],
    ids=[
        "list",
        "table",
        "date",
        "int-for-path",
        "bool-for-float",
        "fraction-for-int",
        "int-for-flag",
        "bad-choice",
        "unknown-key",
    ],  # fmt: skip
)
def test_a_config_value_of_the_wrong_type_is_one_error_line(tmp_path, text, words):
    assert words in _refusal(tmp_path, text + "\n")


def test_an_integral_float_is_a_whole_number(tmp_path):
    config = tmp_path / "build.toml"
    config.write_text("shots-per-chunk = 4.0\nepsilon = 1\n")
    printed = CliRunner().invoke(main, ["build", "--config", str(config), "--print-config"])
    assert printed.exit_code == 0 and "\nshots-per-chunk = 4\n" in printed.stdout
    assert "\nepsilon = 1\n" in printed.stdout
