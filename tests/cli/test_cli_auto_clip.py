"""``build --l2-clip-norm auto --public-data FILE``: C per layer from public records only."""

import json
import math

import numpy as np
import pytest
from click.testing import CliRunner

from dpmtv.cli import main
from dpmtv.data import load_records
from dpmtv.data.prompts import Example, Prompt, blank_image, chunk_prompt
from dpmtv.forward.extract import extract_selected_heads
from dpmtv.heads import parse_head_spec
from tests.conftest import write_records


def _build(model, data, out, *extra):
    args = ["build", "--model", str(model), "--data", str(data), "--heads", "layers:0-1", "--epsilon", "1"]
    args += ["--shots-per-chunk", "4", "--out", str(out), "--quiet", *extra]
    return CliRunner().invoke(main, args)


def _independent_quantiles(loaded, public_path, *, center_blank: bool) -> list[float]:
    """The per-layer median of the heads' norms over disjoint public chunks of 4, one prompt per
    forward pass (the build's helper batches them)."""
    public = load_records(public_path)
    heads = parse_head_spec("layers:0-1", loaded.adapter.geometry)
    reference = {layer: 0.0 for layer in heads.layers}
    if center_blank:
        blank = Prompt((), Example((blank_image(),), "What is the answer?"))
        reference = {
            layer: v[0] for layer, v in extract_selected_heads(loaded.adapter, [blank], heads).items()
        }
    norms = {layer: [] for layer in heads.layers}
    for start in range(0, len(public) - 3, 4):
        prompt = chunk_prompt(public[start : start + 4], query="record", query_question="What is the answer?")
        for layer, values in extract_selected_heads(loaded.adapter, [prompt], heads).items():
            norms[layer].append(float(np.linalg.norm(values[0] - reference[layer])))
    return [float(np.quantile(norms[layer], 0.5)) for layer in heads.layers]


@pytest.mark.parametrize("center", ["none", "blank"])
def test_auto_clip_is_the_public_quantile_and_sets_delta(
    tiny_llava, tiny_llava_path, records_file, tmp_path, center
):
    public = write_records(tmp_path / "public", 12, seed=7)
    out = tmp_path / "v.safetensors"
    result = _build(
        tiny_llava_path,
        records_file,
        out,
        "--l2-clip-norm",
        "auto",
        "--public-data",
        public,
        "--center",
        center,
    )
    assert result.exit_code == 0, result.output
    privacy = json.loads(CliRunner().invoke(main, ["inspect", str(out), "--json"]).stdout)["privacy"]

    expected = _independent_quantiles(tiny_llava, public, center_blank=center == "blank")
    assert privacy["l2_clip_norm"] == pytest.approx(expected, rel=1e-4)
    num_chunks = 24 // 4  # replace-one: m = floor(N/s)
    delta_closed_form = 2 * math.sqrt(sum(c * c for c in expected)) / num_chunks
    assert privacy["num_chunks"] == num_chunks
    assert privacy["l2_sensitivity"] == pytest.approx(delta_closed_form, rel=1e-4)


def test_auto_clip_needs_public_data(tiny_llava_path, records_file, tmp_path):
    result = _build(tiny_llava_path, records_file, tmp_path / "v.safetensors", "--l2-clip-norm", "auto")
    assert result.exit_code != 0 and "--public-data" in result.output
    assert not (tmp_path / "v.safetensors").exists()


def test_auto_clip_refuses_the_private_records_as_public_data(tiny_llava_path, records_file, tmp_path):
    out = tmp_path / "v.safetensors"
    result = _build(
        tiny_llava_path, records_file, out, "--l2-clip-norm", "auto", "--public-data", records_file
    )
    assert result.exit_code != 0 and "--public-data" in result.output
    assert not out.exists()


def test_public_data_without_auto_is_refused(tiny_llava_path, records_file, tmp_path):
    public = write_records(tmp_path / "public", 8, seed=7)
    result = _build(
        tiny_llava_path,
        records_file,
        tmp_path / "v.safetensors",
        "--l2-clip-norm",
        "1",
        "--public-data",
        public,
    )
    assert result.exit_code != 0 and "auto" in result.output
