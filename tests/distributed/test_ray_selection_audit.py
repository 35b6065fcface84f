"""Private head selection and the sensitivity audit on a real local Ray cluster: the same votes
(each chunk counted once, also when a worker dies mid-vote), the same private-selection build and
the same sensitivity ratios as in this process."""

from __future__ import annotations

import json

import numpy as np
import pytest
from click.testing import CliRunner

from dpmtv.artifact.vector import load_task_vector
from dpmtv.audit.sensitivity import audit_sensitivity
from dpmtv.cli import main
from dpmtv.data import load_records
from dpmtv.distributed import RayExecutor
from dpmtv.forward.executor import ModelSource
from dpmtv.heads import parse_head_spec
from dpmtv.pipeline.build import BuildSettings
from dpmtv.privacy.noisy_top_k import head_vote_counts
from dpmtv.selection import chunk_votes
from tests._tolerance import FLOAT32_REL
from tests.conftest import write_records
from tests.distributed._helpers import assert_close_relative, dies_in_batch_one, one_torch_thread
from tests.pipeline.test_build_user_level import write_user_records

pytestmark = pytest.mark.slow

MAX_VOTES = 3


@pytest.fixture(scope="module")
def chunks(tmp_path_factory):
    records = load_records(write_records(tmp_path_factory.mktemp("vote-data"), 21, seed=4))
    # 7 chunks of 3, one without a demonstration, one empty (never sent to a worker)
    return [records[start : start + 3] for start in range(0, 21, 3)] + [records[:1], []]


def _executor(path, **options) -> RayExecutor:
    return RayExecutor(ModelSource(str(path)), workers=2, chunks_per_batch=2, **options)


def _local_votes(loaded, chunks):
    with one_torch_thread():  # as in a Ray actor with one CPU: the same kernel paths
        return chunk_votes(loaded, chunks, max_votes_per_chunk=MAX_VOTES, progress=False)


def test_distributed_votes_equal_the_local_votes(ray_cluster, tiny_llava, tiny_llava_path, chunks):
    local = _local_votes(tiny_llava, chunks)
    with _executor(tiny_llava_path) as executor:
        distributed = chunk_votes(
            tiny_llava, chunks, max_votes_per_chunk=MAX_VOTES, progress=False, executor=executor
        )
    assert distributed == local  # chunk by chunk, in chunk order
    assert sum(map(len, local)) > len(chunks)  # real votes were cast
    assert local[-2:] == [(), ()]  # no demonstration, no records: no vote, also on a worker


def test_a_worker_killed_mid_vote_has_its_chunks_vote_exactly_once(
    ray_cluster, tiny_llava, tiny_llava_path, chunks, tmp_path
):
    local = _local_votes(tiny_llava, chunks)
    with _executor(tiny_llava_path, worker_class=dies_in_batch_one(tmp_path / "killed")) as executor:
        distributed = chunk_votes(
            tiny_llava, chunks, max_votes_per_chunk=MAX_VOTES, progress=False, executor=executor
        )
        attempts = dict(executor.attempts)
    assert (tmp_path / "killed").exists()  # the worker did die
    assert attempts == {0: 1, 1: 2, 2: 1, 3: 1}  # batch 1 sent again, once
    assert len(distributed) == len(chunks) and distributed == local
    geometry = tiny_llava.adapter.geometry
    counts = {
        name: head_vote_counts(
            votes, num_candidates=geometry.num_layers * geometry.num_heads, max_votes_per_chunk=MAX_VOTES
        )
        for name, votes in (("local", local), ("distributed", distributed))
    }
    np.testing.assert_array_equal(counts["distributed"], counts["local"])  # the same histogram


def test_ray_cli_build_with_private_selection_matches_the_local_build(ray_cluster, tiny_llava_path, tmp_path):
    data = write_records(tmp_path / "data", 24, seed=6)
    common = ["build", "--model", str(tiny_llava_path), "--data", str(data), "--heads-from", "private"]
    common += ["--select-k", "3", "--epsilon", "8", "--l2-clip-norm", "50", "--shots-per-chunk", "3"]
    common += ["--neighbouring-relation", "add-remove-one", "--num-chunks", "8"]
    common += ["--insecure-seeded-noise", "9", "--quiet"]
    runner = CliRunner()
    local = runner.invoke(main, [*common, "--out", str(tmp_path / "local.safetensors")])
    ray = runner.invoke(
        main, [*common, "--out", str(tmp_path / "ray.safetensors"), "--ray", "auto", "--workers", "2"]
    )
    assert local.exit_code == 0, local.output
    assert ray.exit_code == 0, ray.output
    vectors = {name: load_task_vector(tmp_path / f"{name}.safetensors") for name in ("local", "ray")}
    metadata = {name: vector.metadata.model_dump(mode="json") for name, vector in vectors.items()}
    for fields in metadata.values():
        del fields["created_at"], fields["tensors_sha256"]
    assert (metadata["local"].pop("workers"), metadata["ray"].pop("workers")) == (1, 2)
    assert metadata["ray"]["head_selection"]["method"] == "private-noisy-top-k"
    assert metadata["ray"] == metadata["local"]  # the same heads picked, the same accounting
    assert_close_relative(vectors["ray"].values, vectors["local"].values, rel=FLOAT32_REL)


SENSITIVITY = BuildSettings(
    epsilon=1.0, delta=1e-5, l2_clip_norm=(1e-3,), shots_per_chunk=4, center="blank", progress=False,
    privacy_unit="user", num_chunks=16, max_records_per_user=2,
)  # fmt: skip


def test_distributed_sensitivity_audit_gives_the_local_ratios(
    ray_cluster, tiny_llava, tiny_llava_path, tmp_path
):
    records = load_records(write_user_records(tmp_path / "users", heavy_seed=0))
    heads = parse_head_spec("layers:0-1", tiny_llava.adapter.geometry)
    options = dict(num_partitions=2, neighbours_per_partition=3)
    local = audit_sensitivity(tiny_llava, records, heads, SENSITIVITY, **options)
    with _executor(tiny_llava_path) as executor:
        distributed = audit_sensitivity(tiny_llava, records, heads, SENSITIVITY, executor=executor, **options)
    assert distributed.violations == () and len(distributed.pairs) == len(local.pairs) == 2 * 4
    # the same chunk vectors up to float32 kernel paths (one chunk per forward pass), summed alike
    ratios = {
        name: [p.ratio for p in audit.pairs] for name, audit in (("local", local), ("ray", distributed))
    }
    np.testing.assert_allclose(ratios["ray"], ratios["local"], rtol=FLOAT32_REL)
    assert all(p.ratio > 0 for p in local.pairs)  # the neighbours did move the mean


def test_ray_cli_sensitivity_audit(ray_cluster, tiny_llava_path, tmp_path):
    data = write_user_records(tmp_path / "users", heavy_seed=0)
    args = ["audit", "--sensitivity", "--model", str(tiny_llava_path), "--data", str(data)]
    args += ["--heads", "layers:0", "--l2-clip-norm", "0.001", "--shots-per-chunk", "4"]
    args += ["--privacy-unit", "user", "--num-chunks", "16", "--max-records-per-user", "2"]
    args += ["--partitions", "1", "--neighbours", "2", "--quiet"]
    runner = CliRunner()
    reports = {}
    for name, extra in (("local", []), ("ray", ["--ray", "auto", "--workers", "2"])):
        result = runner.invoke(main, [*args, *extra, "--out", str(tmp_path / name)])
        assert result.exit_code == 0, result.output
        reports[name] = json.loads((tmp_path / name / "sensitivity.json").read_text())
    ratios = {name: [p["ratio"] for p in report["pairs"]] for name, report in reports.items()}
    np.testing.assert_allclose(ratios["ray"], ratios["local"], rtol=FLOAT32_REL)
