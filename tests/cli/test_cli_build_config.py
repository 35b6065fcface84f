"""`dpmtv build --config build.toml`, `--print-config`, `--json` and the grouped `--help`."""

from __future__ import annotations

import json

from click.testing import CliRunner

from dpmtv.cli import main


def test_print_config_then_config_with_flags_overriding_it(tiny_llava_path, records_file, tmp_path):
    runner = CliRunner()
    printed = runner.invoke(main, ["build", "--print-config"])
    assert (
        printed.exit_code == 0
        and "\ndelta = 1e-05\n" in printed.stdout
        and "\n# epsilon =\n" in printed.stdout
    )
    out = tmp_path / "task.safetensors"
    edits = {
        "# model =": f'model = "{tiny_llava_path}"',
        "# data =": f'data = "{records_file}"',
        "# heads =": 'heads = "layers:0"',
        "# epsilon =": "epsilon = 1.0",
        "# out =": f'out = "{out}"',
        'l2-clip-norm = "5"': 'l2-clip-norm = "1.5"',
        "shots-per-chunk = 8": "shots-per-chunk = 4",
        "quiet = false": "quiet = true",
    }
    text = printed.stdout.replace('model = "embedded"', "# model =")
    for old, new in edits.items():
        assert old in text, old
        text = text.replace(old, new)
    config = tmp_path / "build.toml"
    config.write_text(text)

    built = runner.invoke(main, ["build", "--config", str(config), "--epsilon", "2", "--json"])
    assert built.exit_code == 0, built.output
    summary = json.loads(built.stdout)  # stdout is the JSON object alone
    privacy = summary["metadata"]["privacy"]
    assert summary["path"] == str(out)
    assert privacy["epsilon"] == 2.0  # the flag won over the file
    assert privacy["l2_clip_norm"] == [1.5] and privacy["shots_per_chunk"] == 4  # from the file
    on_disk = json.loads(runner.invoke(main, ["inspect", str(out), "--json"]).stdout)
    assert on_disk == summary["metadata"]  # the artifact records what the build resolved to


def test_a_config_key_that_is_not_an_option_is_a_usage_error(tmp_path):
    config = tmp_path / "build.toml"
    config.write_text("epsilon = 1.0\nepsilom = 2.0\n")
    result = CliRunner().invoke(main, ["build", "--config", str(config)])
    assert result.exit_code == 2 and "'epsilom' is not an option of dpmtv build" in result.output


def test_build_help_is_grouped_with_two_examples():
    text = CliRunner().invoke(main, ["build", "--help"]).output
    headings = ["Model:", "Data:", "Privacy:", "Heads:", "Output:", "Ledger:", "Distributed:", "Examples:"]
    positions = [
        text.index(f"\n{heading}\n") if heading != "Examples:" else text.index(heading)
        for heading in headings
    ]
    assert positions == sorted(positions)
    assert text.count("\n    dpmtv build --") >= 2  # two examples (the second spans two commands)
    privacy = text[text.index("\nPrivacy:\n") : text.index("\nHeads:\n")]
    assert "--epsilon" in privacy and "--model" not in privacy
