"""`dpmtv answer --choices`: each choice's probability, normalised over the choices."""

import json
import math

from click.testing import CliRunner
from PIL import Image

from dpmtv.cli import main
from dpmtv.data.prompts import Example
from dpmtv.inference import choice_probabilities
from dpmtv.models.loading import load_model


def _answer(tiny_llava_path, image, *extra):
    args = ["answer", "--model", str(tiny_llava_path), "--image", str(image), "--question", "Big?", *extra]
    return CliRunner().invoke(main, args)


def test_answer_choices_prints_probabilities_that_sum_to_one(tiny_llava_path, records_file):
    image = records_file.parent / "img" / "0.png"
    result = _answer(tiny_llava_path, image, "--choices", "yes, no,maybe later", "--json")
    assert result.exit_code == 0, result.output
    line = json.loads(result.stdout.splitlines()[-1])
    probabilities = line["probabilities"]
    assert list(probabilities) == ["yes", "no", "maybe later"]
    assert math.isclose(math.fsum(probabilities.values()), 1.0, abs_tol=1e-9)
    assert line["answer"] == max(probabilities, key=probabilities.get)
    with Image.open(image) as opened:
        query = Example((opened.convert("RGB"),), "Big?")
    [expected] = choice_probabilities(load_model(tiny_llava_path), [query], ["yes", "no", "maybe later"])
    assert all(math.isclose(probabilities[k], v, rel_tol=1e-4, abs_tol=1e-7) for k, v in expected.items())


def test_answer_choices_needs_two_answers(tiny_llava_path, records_file):
    result = _answer(tiny_llava_path, records_file.parent / "img" / "0.png", "--choices", "yes")
    assert result.exit_code != 0
    assert "error:" in result.output and "two distinct" in result.output and "Traceback" not in result.output
