"""Head selection resolves its defaults in the library: the settings ``dpmtv build`` and
``dpmtv audit --sensitivity`` make from their options equal, field by field, the settings the
library makes from the same inputs."""

from __future__ import annotations

import dataclasses

import pytest

from dpmtv.cli import audit as audit_cli
from dpmtv.cli import build as build_cli
from dpmtv.cli._audit_rounds import round_settings
from dpmtv.cli._common import build_settings
from dpmtv.pipeline.settings import BuildSettings, PrivateClipSettings, PrivateSelectionSettings


@pytest.mark.parametrize(
    ("unit", "composition", "utility", "fraction"),
    [
        ("record", "sequential", "released-probability", 0.1),
        ("user", "sequential", "noisy-probability", 0.3),  # a user's records would each add a term
        ("record", "parallel", "noisy-probability", 0.3),  # the release of every chunk: sequential
    ],
)
def test_the_candidates_default_utility_is_the_release_where_it_can_run(unit, composition, utility, fraction):
    selection = PrivateSelectionSettings(k=8, method="candidates", composition=composition)
    counts = {"num_chunks": 4, "max_records_per_user": 2} if unit == "user" else {}
    settings = BuildSettings(
        epsilon=1.0, delta=1e-5, l2_clip_norm=(1.0,), shots_per_chunk=4, privacy_unit=unit,
        private_selection=selection, **counts,
    )  # fmt: skip
    resolved = settings.private_selection
    assert (resolved.utility, resolved.selection_fraction) == (utility, fraction)


def test_votes_take_half_the_budget_and_a_given_share_is_kept():
    assert PrivateSelectionSettings(k=2).selection_fraction == 0.5
    given = PrivateSelectionSettings(k=1, method="candidates", utility="probability", selection_fraction=0.4)
    assert (given.selection_fraction, given.defaulted) == (0.4, frozenset())


def test_an_explicit_released_utility_is_still_refused_at_user_level():
    selection = PrivateSelectionSettings(k=1, method="candidates", utility="released-probability")
    with pytest.raises(Exception, match="record only"):
        BuildSettings(
            epsilon=1.0, delta=1e-5, l2_clip_norm=(1.0,), shots_per_chunk=4, privacy_unit="user",
            num_chunks=4, max_records_per_user=2, private_selection=selection,
        )  # fmt: skip


def _fields(settings: BuildSettings) -> dict[str, object]:
    return {field.name: getattr(settings, field.name) for field in dataclasses.fields(settings)}


def _assert_same(cli: BuildSettings, library: BuildSettings) -> None:
    cli_fields, library_fields = _fields(cli), _fields(library)
    for name, value in library_fields.items():
        assert cli_fields[name] == value, name
    for name in ("private_selection", "private_clip"):
        a, b = getattr(cli, name), getattr(library, name)
        assert (a is None) == (b is None), name
        if a is not None:
            assert dataclasses.asdict(a) == dataclasses.asdict(b), name


CASES = [
    ([], {}, {}),
    (["--private-selection", "candidates"], {"method": "candidates"}, {}),
    (["--private-selection", "candidates", "--selection-composition", "parallel"],
     {"method": "candidates", "composition": "parallel"}, {}),
    (["--private-selection", "candidates", "--privacy-unit", "user", "--num-chunks", "4",
      "--max-records-per-user", "2"],
     {"method": "candidates"}, {"privacy_unit": "user", "num_chunks": 4, "max_records_per_user": 2}),
    (["--private-selection", "candidates", "--selection-utility", "probability",
      "--selection-fraction", "0.2"],
     {"method": "candidates", "utility": "probability", "selection_fraction": 0.2}, {}),
]  # fmt: skip


@pytest.mark.parametrize(("args", "selection", "build"), CASES)
def test_the_cli_and_the_library_make_the_same_settings(tiny_llava_path, tiny_llava, args, selection, build):
    common = ["--model", str(tiny_llava_path), "--data", "records.jsonl", "--epsilon", "1"]
    common += ["--shots-per-chunk", "4", "--heads-from", "private", "--select-k", "3"]
    common += ["--l2-clip-norm", "private", "--quiet"]
    library = BuildSettings(
        epsilon=1.0, delta=1e-5, l2_clip_norm=(1.0,), shots_per_chunk=4, progress=False,
        private_selection=PrivateSelectionSettings(k=3, **selection), private_clip=PrivateClipSettings(),
        head_selection={"method": "private"}, **build,
    )  # fmt: skip

    options = build_cli.command.make_context("build", [*common, "--out", "v.safetensors", *args]).params
    _, from_build = build_cli._heads_and_settings(tiny_llava, options)
    _assert_same(from_build, library)

    audit_args = [*common, "--out", "audit", "--sensitivity", *args]
    options = audit_cli.command.make_context("audit", audit_args).params
    from_audit = build_settings(options, **round_settings(tiny_llava, options))
    _assert_same(from_audit, dataclasses.replace(library, head_selection=from_audit.head_selection))
