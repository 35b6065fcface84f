"""The sensitivity audit runs the build's own partition, extraction and Δ, so it sees wiring bugs:
a correct build stays within Δ, the old user-level wiring and a Δ half too small are flagged."""

from __future__ import annotations

import numpy as np
import pytest

import dpmtv.pipeline.partition as partition_module
import dpmtv.pipeline.plan as plan_module
from dpmtv.audit.sensitivity import audit_sensitivity
from dpmtv.data import load_records
from dpmtv.forward.executor import LocalExecutor
from dpmtv.heads import parse_head_spec
from dpmtv.pipeline.build import BuildSettings
from dpmtv.privacy import AdjacencyRelation, PrivacyUnit
from tests.pipeline.test_build_user_level import write_user_records

USER_LEVEL = dict(privacy_unit="user", num_chunks=16, max_records_per_user=2)


def _settings(**changes) -> BuildSettings:
    # A tiny clip norm clips every chunk, and centering on a blank image spreads the directions,
    # so changes move chunk vectors by a sizeable share of the worst case 2C.
    base = dict(
        epsilon=1.0, delta=1e-5, l2_clip_norm=(1e-3,), shots_per_chunk=4, center="blank", progress=False
    )
    return BuildSettings(**{**base, **changes})


@pytest.fixture
def user_records(tmp_path):
    return load_records(write_user_records(tmp_path / "users", heavy_seed=0))


def _audit(tiny_llava, records, settings, **kwargs):
    heads = parse_head_spec("layers:0-1", tiny_llava.adapter.geometry)
    return audit_sensitivity(tiny_llava, records, heads, settings, **kwargs)


def test_a_correct_user_level_build_stays_within_its_sensitivity(tiny_llava, user_records):
    audit = _audit(
        tiny_llava, user_records, _settings(**USER_LEVEL), num_partitions=2, neighbours_per_partition=9
    )
    assert audit.privacy_unit == "user" and audit.neighbouring_relation == "add-remove-one"
    assert {row["change"] for row in audit.rows()} == {"add", "remove"}
    assert audit.violations == () and 0 < audit.worst.ratio <= 1
    # every user (the heavy one included) was removed in each partition
    assert sum(p.change == "remove" for p in audit.pairs) == 2 * 9


def test_the_old_user_level_wiring_is_flagged(tiny_llava, user_records, monkeypatch):
    """The wiring before the fix: record ids hashed into the chunks, no per-user cap."""
    real = partition_module.partition_records

    def record_level(records, **kwargs):
        kwargs.update(
            unit=PrivacyUnit.RECORD, relation=AdjacencyRelation.ADD_REMOVE_ONE, max_records_per_user=None
        )
        return real(records, **kwargs)

    monkeypatch.setattr(partition_module, "partition_records", record_level)
    audit = _audit(
        tiny_llava, user_records, _settings(**USER_LEVEL), num_partitions=1, neighbours_per_partition=9
    )
    assert audit.violations and audit.worst.ratio > 1
    assert audit.worst.target == "user heavy"


def test_a_sensitivity_half_too_small_is_flagged(tiny_llava, user_records, monkeypatch):
    real = plan_module.l2_sensitivity
    monkeypatch.setattr(plan_module, "l2_sensitivity", lambda **kwargs: real(**kwargs) / 2)
    audit = _audit(
        tiny_llava, user_records, _settings(**USER_LEVEL), num_partitions=1, neighbours_per_partition=2
    )
    assert audit.violations and audit.worst.ratio > 1


@pytest.mark.parametrize(
    ("relation", "changes"), [("replace-one", {"replace"}), ("add-remove-one", {"add", "remove"})]
)
def test_record_level_builds_stay_within_their_sensitivity(tiny_llava, records_file, relation, changes):
    extra = {"num_chunks": 6} if relation == "add-remove-one" else {}
    settings = _settings(neighbouring_relation=relation, **extra)
    audit = _audit(
        tiny_llava, load_records(records_file), settings, num_partitions=1, neighbours_per_partition=3
    )
    assert {row["change"] for row in audit.rows()} == changes
    assert audit.violations == () and audit.worst.ratio <= 1
    for pair in audit.pairs:
        assert pair.l2_sensitivity == pair.l2_sensitivity_neighbour  # Δ does not depend on the data
        assert np.isfinite(pair.ratio)


def test_the_report_names_the_worst_pair_and_writes_files(tiny_llava, user_records, tmp_path):
    audit = _audit(
        tiny_llava, user_records, _settings(**USER_LEVEL), num_partitions=1, neighbours_per_partition=1
    )
    paths = audit.write(tmp_path / "out")
    assert paths["json"].exists() and "| user | add-remove-one |" in paths["markdown"].read_text()
    (row,) = [r for r in audit.rows() if r["change"] == "add"]
    assert row["worst_pair"]["partition_seed"] == 0 and row["pairs"] == 1


class _CouplingExecutor(LocalExecutor):
    """An injected coupling bug: every chunk's clipped vector is pushed along a direction chosen
    by the WHOLE dataset (here: the number of records), then clipped again, so each chunk stays
    inside its clip ball and the changed chunk alone moves by at most 2C — but every other chunk
    moves too. The chunk cache keys chunks by their own records, so it cannot see this."""

    def run(self, loaded, records, partition, task, *, progress=False):
        rows = np.asarray(super().run(loaded, records, partition, task, progress=progress))
        direction = np.zeros(rows.shape[1])
        direction[len(records) % rows.shape[1]] = 1.0
        shifted = rows + 0.9 * CLIP * direction
        norms = np.linalg.norm(shifted, axis=1, keepdims=True)
        return shifted * np.minimum(1.0, CLIP * (1 - 1e-9) / norms)


CLIP = 1e-3


def test_an_injected_coupling_between_chunks_is_caught_by_the_rebuild(tiny_llava, records_file):
    """Issue 23.5: the cached path alone passes this bug (ratios <= 1); the rebuild flags it."""
    settings = _settings(neighbouring_relation="add-remove-one", num_chunks=8, l2_clip_norm=(CLIP,))
    records = load_records(records_file)
    kwargs = dict(num_partitions=2, neighbours_per_partition=2, executor=_CouplingExecutor())
    cached_only = _audit(tiny_llava, records, settings, rebuild_pairs=0, **kwargs)
    assert cached_only.violations == () and cached_only.worst.ratio <= 1
    audit = _audit(tiny_llava, records, settings, rebuild_pairs=2, **kwargs)
    rebuilt = [p for p in audit.pairs if p.rebuild_gap is not None]
    assert len(rebuilt) == 2 and all(p in audit.violations for p in rebuilt)
    assert min(p.rebuild_gap for p in rebuilt) > 1 and max(p.ratio_rebuilt for p in rebuilt) > 1


def test_a_correct_build_passes_the_rebuild(tiny_llava, records_file):
    settings = _settings(neighbouring_relation="add-remove-one", num_chunks=8)
    audit = _audit(
        tiny_llava, load_records(records_file), settings, num_partitions=2, neighbours_per_partition=2
    )
    rebuilt = [p for p in audit.pairs if p.rebuild_gap is not None]
    assert len(rebuilt) == 2 and audit.violations == ()
    assert max(p.rebuild_gap for p in rebuilt) < 1e-9
