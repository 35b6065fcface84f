"""`plan`'s geometry read from config.json as JSON equals the transformers config's, per family."""

from __future__ import annotations

import json

import pytest

from dpmtv.errors import UnsupportedModelError
from dpmtv.models.base import HeadGeometry
from dpmtv.models.config_file import read_head_geometry_fast
from dpmtv.models.loading import read_head_geometry
from dpmtv.testing import TINY_FAMILIES, build_tiny_checkpoint


@pytest.mark.parametrize("family", TINY_FAMILIES)
def test_json_geometry_equals_the_transformers_configs(family, tmp_path):
    try:
        path = build_tiny_checkpoint(family, tmp_path / family)
    except ImportError as exc:  # a family whose classes this transformers lacks
        pytest.skip(str(exc))
    try:
        expected = read_head_geometry(path)
    except UnsupportedModelError as refused:  # a refused family is refused by both routes
        with pytest.raises(UnsupportedModelError, match="is not supported"):
            read_head_geometry_fast(path)
        assert "is not supported" in str(refused)
        return
    assert read_head_geometry_fast(path) == expected


def test_embedded_geometry_equals_the_transformers_configs():
    assert read_head_geometry_fast("embedded") == read_head_geometry("embedded") == HeadGeometry(4, 8, 16)


def test_a_config_leaving_values_to_defaults_goes_through_transformers(tiny_llava_path, tmp_path):
    config = json.loads((tiny_llava_path / "config.json").read_text())
    expected = read_head_geometry(tiny_llava_path)
    del config["text_config"]["head_dim"], config["text_config"]["num_hidden_layers"]
    (tmp_path / "config.json").write_text(json.dumps(config))
    # LlamaConfig's own default layer count (32) and hidden/heads, as the build would read them
    assert read_head_geometry_fast(tmp_path) == read_head_geometry(tmp_path) != expected


def test_a_missing_folder_is_named(tmp_path):
    with pytest.raises(Exception, match="does not exist"):
        read_head_geometry_fast(tmp_path / "nowhere")
