"""CLI bad-input cases from docs/faults.md: one clear line, exit code 2, no traceback."""

from __future__ import annotations

import pytest
from click.testing import CliRunner
from PIL import Image

from dpmtv.cli import main
from dpmtv.errors import ParameterError
from dpmtv.forward.extract import iter_batches


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
    assert result.exit_code == 1
    assert "model folder '/models/Qwen2-VL-2B-Instruct' does not exist" in " ".join(result.output.split())


@pytest.mark.parametrize("unit", ["user", "record"])
def test_records_with_user_ids_but_no_record_ids(tiny_llava_path, tmp_path, unit):
    """User level needs no record ids (users are hashed); record-level add/remove asks for them
    with one line naming the file, line and field."""
    import json

    from tests.conftest import write_records

    path = write_records(tmp_path, 12, with_ids=False)
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    path.write_text("".join(json.dumps({**row, "user_id": f"u{i % 3}"}) + "\n" for i, row in enumerate(rows)))
    args = ["build", "--model", str(tiny_llava_path), "--data", str(path), "--heads", "layers:0"]
    args += ["--epsilon", "1", "--l2-clip-norm", "1", "--shots-per-chunk", "2", "--num-chunks", "2"]
    args += ["--out", str(tmp_path / "t.safetensors"), "--quiet"]
    if unit == "user":
        args += ["--privacy-unit", "user", "--max-records-per-user", "2"]
    else:
        args += ["--neighbouring-relation", "add-remove-one"]
    result = CliRunner().invoke(main, args)
    if unit == "user":
        assert result.exit_code == 0, result.output
    else:
        assert result.exit_code == 1 and "Traceback" not in result.output
        assert "records.jsonl:1: field 'id' is missing" in " ".join(result.output.split())
