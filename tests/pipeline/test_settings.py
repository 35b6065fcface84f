"""The typed build settings and the one partition entry point: the privacy unit cannot be lost."""

from __future__ import annotations

import inspect
from pathlib import Path

import numpy as np
import pytest

from dpmtv.errors import ParameterError
from dpmtv.pipeline.build import BuildSettings, Centering, QueryKind
from dpmtv.privacy import AdjacencyRelation, PrivacyUnit, partition_private_records

BASE = dict(epsilon=1.0, delta=1e-5, l2_clip_norm=(1.0,), shots_per_chunk=4)


def test_settings_are_keyword_only_and_typed():
    with pytest.raises(TypeError):
        BuildSettings(1.0, 1e-5, (1.0,), 4)  # the positional form is refused
    settings = BuildSettings(**BASE, privacy_unit="user", num_chunks=8, max_records_per_user=2)
    assert settings.privacy_unit is PrivacyUnit.USER
    assert settings.relation is AdjacencyRelation.ADD_REMOVE_ONE  # the user unit's relation
    assert BuildSettings(**BASE).relation is AdjacencyRelation.REPLACE_ONE
    public = BuildSettings(**BASE, query="pictures/q.png", center="public.jsonl")
    assert public.query is QueryKind.PUBLIC_IMAGE and public.query_image == Path("pictures/q.png")
    assert public.center is Centering.PUBLIC_RECORDS and public.center_source == "public.jsonl"
    assert BuildSettings(**BASE, query="blank").query_source == "blank"


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        (
            dict(
                privacy_unit="user", neighbouring_relation="replace-one", num_chunks=4, max_records_per_user=2
            ),
            "add-remove-one",
        ),
        (dict(privacy_unit="user", max_records_per_user=2), "--num-chunks"),
        (dict(privacy_unit="user", num_chunks=4), "--max-records-per-user"),
        (dict(num_chunks=4), "only for add-remove-one"),
        (dict(max_records_per_user=3), "only for --privacy-unit user"),
        (dict(neighbouring_relation="add-remove-one"), "--num-chunks"),
        (dict(neighbouring_relation="add-remove-one", num_chunks=0), "num_chunks"),
        (dict(privacy_unit="users"), "unknown privacy unit"),
        (dict(neighbouring_relation="swap"), "unknown neighbouring relation"),
        (dict(batch_size=0), "batch_size"),
        (dict(query="blank", query_image="q.png"), "query"),
    ],
)
def test_bad_settings_are_refused_on_construction(changes, message):
    with pytest.raises(ParameterError, match=message):
        BuildSettings(**{**BASE, **changes})


def test_the_partition_entry_point_has_no_default_unit_or_relation():
    parameters = inspect.signature(partition_private_records).parameters
    for name in ("unit", "relation", "insecure_seed", "num_chunks", "max_records_per_user"):
        assert (
            parameters[name].default is inspect.Parameter.empty
            and parameters[name].kind is parameters[name].KEYWORD_ONLY
        )


def _users(seed):
    users = [f"u{i % 7}" for i in range(40)]
    return partition_private_records(
        unit=PrivacyUnit.USER,
        relation=AdjacencyRelation.ADD_REMOVE_ONE,
        record_ids=None,
        user_ids=users,
        num_records=len(users),
        shots_per_chunk=4,
        num_chunks=5,
        max_records_per_user=3,
        insecure_seed=seed,
    )


def test_a_seed_fixes_the_user_partition_and_caps_and_no_seed_does_not():
    def chunks(result):
        return [chunk.tolist() for chunk in result.partition.chunks]

    assert chunks(_users(3)) == chunks(_users(3))
    assert _users(3).num_users == 7 and _users(3).partition.num_unused == 40 - 7 * 3
    draws = {str(chunks(_users(None))) for _ in range(6)}
    assert len(draws) > 1  # fresh keys from OS entropy: 6 equal draws has probability < 1e-3


def test_a_seed_fixes_the_replace_one_permutation_apart_from_the_noise_stream():
    from dpmtv.privacy import seeded_rng

    result = partition_private_records(
        unit=PrivacyUnit.RECORD,
        relation=AdjacencyRelation.REPLACE_ONE,
        record_ids=None,
        user_ids=None,
        num_records=20,
        shots_per_chunk=4,
        num_chunks=None,
        max_records_per_user=None,
        insecure_seed=9,
    )
    # the permutation does not reuse the bits of the seeded noise stream (seeded_rng(seed))
    assert not np.array_equal(np.concatenate(result.partition.chunks), seeded_rng(9).permutation(20))
