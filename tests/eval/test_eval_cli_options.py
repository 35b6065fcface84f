"""`dpmtv eval` options as a newcomer meets them: help for every option, --heads marked required
where it is, errors in CLI words, and the same defaults as `build`."""

import pytest
from click.testing import CliRunner

from dpmtv.cli import main
from dpmtv.cli.build import command as build_command
from dpmtv.cli.eval import command as eval_command
from dpmtv.cli.plan import command as plan_command


def _option(command, name):
    return next(p for p in command.params if p.name == name)


@pytest.mark.parametrize("name", ["l2_clip_norm", "shots_per_chunk"])
def test_eval_build_and_plan_share_their_defaults(name):
    defaults = {str(_option(c, name).default) for c in (eval_command, build_command, plan_command)}
    assert len(defaults) == 1, defaults


def test_every_eval_option_has_help_and_heads_says_when_it_is_required():
    missing = [p.name for p in eval_command.params if getattr(p, "help", None) is None and p.name != "help"]
    assert missing == []
    assert "REQUIRED whenever --methods has mtv or dp-mtv" in _option(eval_command, "head_spec").help


def test_eval_without_heads_names_the_option_before_any_loading(tmp_path):
    result = CliRunner().invoke(main, ["eval", "--benchmark", "embedded", "--out", str(tmp_path / "o")])
    assert result.exit_code == 2
    assert "--heads is required with mtv or dp-mtv" in result.output


def test_eval_errors_speak_cli_not_python(tmp_path):
    result = CliRunner().invoke(
        main,
        ["eval", "--benchmark", "embedded", "--methods", "mtv", "--heads", "all", "--out", str(tmp_path)],
    )
    assert result.exit_code != 0 and "--non-private" in result.output
    assert "allow_non_private" not in result.output and "=True" not in result.output
