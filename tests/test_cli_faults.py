"""CLI bad-input cases from docs/faults.md: one clear line, exit code 2, no traceback."""

from __future__ import annotations

import pytest
from click.testing import CliRunner
from PIL import Image

from dpmtv.cli import main
from dpmtv.errors import ParameterError
from dpmtv.extract import iter_batches


@pytest.mark.parametrize(
    "option, value",
    [("--batch-size", "0"), ("--batch-size", "-1"), ("--max-new-tokens", "0"), ("--max-new-tokens", "-1")],
)
def test_answer_refuses_non_positive_counts(tiny_llava_path, tmp_path, option, value):
    image = tmp_path / "q.png"
    Image.new("RGB", (16, 16)).save(image)
    args = ["answer", "--model", str(tiny_llava_path), "--image", str(image), "--question", "q"]
    args += [option, value]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 2, result.output
    assert option in result.output and value in result.output
    assert "Traceback" not in result.output


@pytest.mark.parametrize("batch_size", [0, -1])
def test_batching_refuses_a_non_positive_batch_size(batch_size):
    with pytest.raises(ParameterError, match=f"batch_size must be >= 1, got {batch_size}"):
        list(iter_batches(["p"] * 3, batch_size))


def test_a_missing_model_folder_is_named_as_a_folder(tmp_path):
    result = CliRunner().invoke(
        main,
        [
            "plan",
            "--model",
            "/models/Qwen2-VL-2B-Instruct",
            "--heads",
            "all",
            "--num-records",
            "64",
            "--epsilon",
            "1",
        ],
    )
    assert result.exit_code == 2
    assert "model folder '/models/Qwen2-VL-2B-Instruct' does not exist" in " ".join(result.output.split())
