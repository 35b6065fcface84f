"""The model card beside every artifact (``task.safetensors`` → ``task.README.md``): a Hugging
Face card with YAML front matter, rendered from public metadata only."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from dpmtv.artifact.card import card_path
from dpmtv.cli import main
from dpmtv.data import load_records
from dpmtv.errors import ParameterError
from dpmtv.heads import parse_head_spec
from dpmtv.pipeline.build import BuildSettings, build_task_vector
from tests.cli.test_cli import _build_args
from tests.conftest import write_records

# created_at and the tensor hash are public (a wall-clock time; a function of the noisy release)
PUBLIC_VARYING = re.compile(r"(\| created \| ).*( \|)|(\| tensors_sha256 \| ).*( \|)")


def _card_of_build(loaded, folder: Path, num_records: int) -> str:
    records = load_records(write_records(folder, num_records, seed=num_records))
    settings = BuildSettings(
        epsilon=4.0,
        delta=1e-5,
        l2_clip_norm=(1.0,),
        shots_per_chunk=4,
        neighbouring_relation="add-remove-one",
        num_chunks=4,
        progress=False,
    )
    heads = parse_head_spec("layers:0-1", loaded.adapter.geometry)
    out = folder / "task.safetensors"
    build_task_vector(loaded, records, heads, settings, out=out)
    return card_path(out).read_text(encoding="utf-8")


def test_cards_of_builds_on_different_n_differ_only_in_public_fields(tiny_llava, tmp_path):
    small = _card_of_build(tiny_llava, tmp_path / "small", 6)
    large = _card_of_build(tiny_llava, tmp_path / "large", 60)
    assert small != large  # the creation time and the noisy tensors' hash
    assert PUBLIC_VARYING.sub(r"\1\2\3\4", small) == PUBLIC_VARYING.sub(r"\1\2\3\4", large)
    for private_count in ("| 6 |", "| 60 |", " 6 records", " 60 records"):
        assert private_count not in small + large


def test_the_card_is_a_hub_model_card_with_the_guarantee_in_words(tiny_llava_path, records_file, tmp_path):
    out = tmp_path / "task.safetensors"
    assert CliRunner().invoke(main, _build_args(tiny_llava_path, records_file, out)).exit_code == 0
    text = (tmp_path / "task.README.md").read_text(encoding="utf-8")
    _, front, body = text.split("---\n", 2)
    meta = yaml.safe_load(front)
    # a local checkpoint that records no hub id: no base_model, the folder named in the body
    assert meta["library_name"] == "dpmtv" and "base_model" not in meta
    assert f"# dpmtv task vector for the local checkpoint `{tiny_llava_path}`" in body
    assert meta["dpmtv"]["epsilon"] == 1 and meta["dpmtv"]["neighbouring_relation"] == "replace-one"
    assert "(1, 1e-05)-differential privacy per record" in body and "replacing one record" in body
    assert "attention_weights_sha256" in body and "(0, 0)" in body and "Not protected" in body

    printed = CliRunner().invoke(main, ["inspect", str(out), "--card"])
    assert printed.exit_code == 0 and printed.stdout == text


def test_a_non_private_card_says_there_is_no_guarantee(tiny_llava_path, records_file, tmp_path):
    out = tmp_path / "baseline.safetensors"
    args = [a for a in _build_args(tiny_llava_path, records_file, out) if a not in ("--epsilon", "1")]
    assert CliRunner().invoke(main, [*args, "--non-private"]).exit_code == 0
    text = (tmp_path / "baseline.README.md").read_text(encoding="utf-8")
    assert "**No privacy guarantee**" in text and '"private": false' in text


def test_a_file_where_the_card_goes_is_never_replaced(tmp_path):
    from dpmtv.cli._output_path import check_output_path

    (tmp_path / "task.README.md").write_text("# my notes\n")
    with pytest.raises(ParameterError, match="is not a dpmtv card"):
        check_output_path(tmp_path / "task.safetensors", force=True, protected={})


def test_base_model_is_a_hub_id_only_when_the_checkpoint_records_one(tiny_llava_path, tmp_path):
    import json
    import shutil

    from dpmtv.artifact.card import _front_matter
    from dpmtv.models.fingerprint import hub_id

    copy = tmp_path / "saved-from-hub"
    shutil.copytree(tiny_llava_path, copy)
    config = json.loads((copy / "config.json").read_text())
    (copy / "config.json").write_text(json.dumps({**config, "_name_or_path": "acme/tiny-vlm"}))
    assert hub_id(str(copy)) == "acme/tiny-vlm"  # what the local folder's config records
    assert hub_id("Qwen/Qwen2-VL-2B-Instruct") == "Qwen/Qwen2-VL-2B-Instruct"  # loaded by hub id
    assert hub_id(str(tiny_llava_path)) is None  # records none
    (tmp_path / "org" / "name").mkdir(parents=True)
    assert hub_id(str(tmp_path / "org" / "name")) is None  # a local folder, however it is spelled

    class Metadata:
        format_version = 3
        privacy = type("P", (), {"private": False, "neighbouring_relation": "replace-one",
                                 "privacy_unit": "record", "noise_sampler": "opendp",
                                 "noise_std": 0.0})()  # fmt: skip
        model = {"model_type": "llava", "name_or_path": str(copy), "hub_id": "acme/tiny-vlm"}

    assert 'base_model: "acme/tiny-vlm"' in _front_matter(Metadata)
    Metadata.model = {**Metadata.model, "hub_id": None}
    assert "base_model" not in _front_matter(Metadata)


def test_a_csprng_numpy_card_carries_the_floating_point_caveat(tiny_llava_path, records_file, tmp_path):
    """Box–Muller in float64 is a secure source but not floating-point safe: the card says both,
    in its words and its front matter; an OpenDP card says neither caveat."""
    cards = {}
    for sampler in ("csprng-numpy", "opendp"):
        out = tmp_path / f"{sampler}.safetensors"
        args = [*_build_args(tiny_llava_path, records_file, out), "--noise-sampler", sampler]
        assert CliRunner().invoke(main, args).exit_code == 0
        cards[sampler] = card_path(out).read_text(encoding="utf-8")
    fast = " ".join(cards["csprng-numpy"].split())
    assert "a secure source; not floating-point safe: csprng-numpy noise, Box–Muller in float64" in fast
    assert yaml.safe_load(cards["csprng-numpy"].split("---\n")[1])["dpmtv"]["floating_point_safe"] is False
    assert "floating-point safe" not in cards["opendp"].split("---\n", 2)[2]
    assert yaml.safe_load(cards["opendp"].split("---\n")[1])["dpmtv"]["floating_point_safe"] is True
