"""What the command line says an artifact guarantees: seeded and non-private vectors say NO
GUARANTEE everywhere (build summary, inspect, answer) and store ``"private": false``."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from dpmtv.cli import main
from tests.cli.test_cli import _build_args


@pytest.fixture
def runner():
    return CliRunner()


def _answer(runner, model, vector, records_file):
    image = records_file.parent / "img" / "0.png"
    args = ["answer", "--model", str(model), "--vector", str(vector), "--image", str(image)]
    return runner.invoke(main, [*args, "--question", "What?", "--max-new-tokens", "1"])


@pytest.mark.parametrize(
    ("extra", "label"),
    [(["--insecure-seeded-noise", "3"], "NO GUARANTEE (seeded noise)"), (["--non-private"], "NO GUARANTEE")],
)
def test_unprivate_vectors_say_no_guarantee_everywhere(
    runner, tiny_llava_path, records_file, tmp_path, extra, label
):
    out = tmp_path / "v.safetensors"
    args = _build_args(tiny_llava_path, records_file, out, *extra)
    if "--non-private" in extra:
        args.remove("--epsilon"), args.remove("1")
    built = runner.invoke(main, args)
    assert built.exit_code == 0, built.output
    inspected = runner.invoke(main, ["inspect", str(out)])
    answered = _answer(runner, tiny_llava_path, out, records_file)
    for result in (built, inspected, answered):
        assert result.exit_code == 0, result.output
        assert label in result.output and "-DP per" not in result.output
    metadata = json.loads(runner.invoke(main, ["inspect", str(out), "--json"]).stdout)
    assert metadata["privacy"]["private"] is False


def test_a_private_vector_states_its_guarantee_when_answering(
    runner, tiny_llava_path, records_file, tmp_path
):
    out = tmp_path / "v.safetensors"
    assert runner.invoke(main, _build_args(tiny_llava_path, records_file, out)).exit_code == 0
    answered = _answer(runner, tiny_llava_path, out, records_file)
    assert answered.exit_code == 0 and "(1, 1e-05)-DP per record" in answered.output
    assert "NO GUARANTEE" not in answered.output


def test_csprng_numpy_vectors_say_not_floating_point_safe_everywhere(
    runner, tiny_llava_path, records_file, tmp_path
):
    """Box–Muller in float64 is not floating-point safe (issue 23.4): the build summary, inspect,
    answer and serve's /v1/models say so; an OpenDP vector does not."""
    from dpmtv.serve import load_served_model
    from dpmtv.serve._guarantee import model_cards

    fast, exact = tmp_path / "fast.safetensors", tmp_path / "exact.safetensors"
    built = runner.invoke(
        main, _build_args(tiny_llava_path, records_file, fast, "--noise-sampler", "csprng-numpy")
    )
    assert runner.invoke(main, _build_args(tiny_llava_path, records_file, exact)).exit_code == 0
    inspected = runner.invoke(main, ["inspect", str(fast)])
    answered = _answer(runner, tiny_llava_path, fast, records_file)
    for result in (built, inspected, answered):
        assert result.exit_code == 0, result.output
        assert "not floating-point safe" in " ".join(result.output.replace("│", " ").split()), result.output
    assert "floating-point" not in runner.invoke(main, ["inspect", str(exact)]).output
    served = load_served_model(str(tiny_llava_path), [("fast", fast), ("exact", exact)])
    cards = {card["id"]: card["dpmtv"] for card in model_cards(served)}
    assert "not floating-point safe" in cards["fast"]["privacy_statement"]
    assert cards["fast"]["guarantee"]["floating_point_safe"] is False
    assert "floating-point" not in cards["exact"]["privacy_statement"]
    assert cards["exact"]["guarantee"]["floating_point_safe"] is True


def test_serve_describes_a_seeded_vector_as_noised_with_a_recoverable_seed(
    runner, tiny_llava_path, records_file, tmp_path
):
    from dpmtv.serve import load_served_model
    from dpmtv.serve._guarantee import model_cards

    out = tmp_path / "seeded.safetensors"
    built = runner.invoke(
        main, _build_args(tiny_llava_path, records_file, out, "--insecure-seeded-noise", "3")
    )
    assert built.exit_code == 0, built.output
    card = model_cards(load_served_model(str(tiny_llava_path), [("seeded", out)]))[0]["dpmtv"]
    statement = card["privacy_statement"]
    assert "without noise" not in statement and "ε = ∞" not in statement
    assert "seed 3" in statement and "recover" in statement and statement.startswith("NOT PRIVATE")
