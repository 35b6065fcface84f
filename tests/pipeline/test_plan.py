"""`dpmtv plan`: the preview's Δ and σ are the build's own, and the smallest m is the smallest."""

from __future__ import annotations

import json
import math

import pytest
from click.testing import CliRunner

from dpmtv.cli import main
from dpmtv.heads import parse_head_spec
from dpmtv.models.base import HeadGeometry
from dpmtv.pipeline.preview import preview_release, smallest_num_chunks
from dpmtv.privacy.signal import signal_to_noise_per_layer, weak_signal_warnings

GEOMETRY = HeadGeometry(num_layers=4, num_heads=4, head_dim=16)
SETTINGS = dict(
    geometry=GEOMETRY,
    heads=parse_head_spec("heads:0.1,0.2,2.0", GEOMETRY),
    l2_clip_norm=(2.0, 0.5),
    num_chunks=40,
    epsilon=1.0,
    delta=1e-5,
    relation="replace-one",
)


def test_plan_matches_the_builds_own_sensitivity_and_noise(tiny_llava_path, records_file, tmp_path):
    runner = CliRunner()
    out = tmp_path / "t.safetensors"
    common = ["--model", str(tiny_llava_path), "--heads", "layers:0", "--epsilon", "1", "--delta", "1e-5"]
    common += ["--l2-clip-norm", "1.5", "--shots-per-chunk", "4"]
    built = runner.invoke(main, ["build", *common, "--data", str(records_file), "--out", str(out), "--quiet"])
    assert built.exit_code == 0, built.output
    privacy = json.loads(runner.invoke(main, ["inspect", str(out), "--json"]).stdout)["privacy"]
    planned = runner.invoke(main, ["plan", *common, "--num-records", "24", "--json"])
    assert planned.exit_code == 0, planned.output
    report = json.loads(planned.stdout)
    assert report["num_chunks"] == privacy["num_chunks"] == 6
    assert report["l2_sensitivity"] == pytest.approx(privacy["l2_sensitivity"], rel=1e-12)
    assert report["noise_std"] == pytest.approx(privacy["noise_std"], rel=1e-12)


def test_noise_norm_is_sigma_times_root_coordinates():
    preview = preview_release(**SETTINGS)
    sigma = preview.plan.noise_std
    (layer0, layer2) = preview.layers
    assert (layer0.num_coordinates, layer2.num_coordinates) == (32, 16)
    assert layer0.noise_rms_norm == pytest.approx(sigma * math.sqrt(32), rel=1e-12)
    assert layer2.ratio == pytest.approx(0.5 / (sigma * 4), rel=1e-12)


@pytest.mark.parametrize("target", [0.5, 1.0, 3.0])
def test_smallest_num_chunks_is_the_smallest_reaching_the_target(target):
    found = smallest_num_chunks(target, **SETTINGS)
    assert found.min_ratio >= target
    below = preview_release(**{**SETTINGS, "num_chunks": found.num_chunks - 1})
    assert below.min_ratio < target


def test_weak_signal_is_warned_with_the_numbers():
    layers = signal_to_noise_per_layer(noise_std=11.4, l2_clip_norms={3: 5.0}, num_coordinates={3: 64})
    (warning,) = weak_signal_warnings(layers)
    assert "layer 3" in warning and "91.2" in warning and "at most 5" in warning
    assert (
        weak_signal_warnings(
            signal_to_noise_per_layer(noise_std=0.01, l2_clip_norms={3: 5.0}, num_coordinates={3: 64})
        )
        == []
    )


@pytest.mark.parametrize(("epsilon", "warned"), [(1.0, True), (20.0, False)])
def test_a_build_warns_when_the_noise_swamps_the_signal(tiny_llava, records_file, epsilon, warned):
    """24 records in chunks of 4 (m = 6) with C = 1.5: at ε = 1 the expected noise norm per layer
    is several times C; at ε = 20 it is below C."""
    from dpmtv.data import load_records
    from dpmtv.pipeline.build import BuildSettings, build_task_vector

    settings = BuildSettings(
        epsilon=epsilon, delta=1e-5, l2_clip_norm=(1.5,), shots_per_chunk=4, progress=False
    )
    heads = parse_head_spec("layers:0", tiny_llava.adapter.geometry)
    with pytest.warns(UserWarning) if warned else _no_weak_signal_warning():
        result = build_task_vector(tiny_llava, load_records(records_file), heads, settings)
    assert any("noise swamps the signal" in note for note in result.warnings) is warned


def _no_weak_signal_warning():
    import contextlib
    import warnings

    @contextlib.contextmanager
    def check():
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            yield
        assert not any("noise swamps" in str(w.message) for w in caught)

    return check()
