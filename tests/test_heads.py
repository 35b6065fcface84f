import json

import pytest

from dpmtv.errors import HeadSpecError
from dpmtv.heads import HeadSet, parse_head_spec
from dpmtv.models.base import HeadGeometry

GEOMETRY = HeadGeometry(num_layers=4, num_heads=3, head_dim=8)


def test_all_heads():
    heads = parse_head_spec("all", GEOMETRY)
    assert len(heads) == 12 and heads.layers == [0, 1, 2, 3]


def test_layer_ranges_and_lists():
    assert parse_head_spec("layers:1-2", GEOMETRY).pairs == ((1, 0), (1, 1), (1, 2), (2, 0), (2, 1), (2, 2))
    assert parse_head_spec("layers:0,3", GEOMETRY).layers == [0, 3]


def test_explicit_pairs_are_sorted_and_deduplicated():
    heads = parse_head_spec("heads:3.1,0.2,3.1", GEOMETRY)
    assert heads.pairs == ((0, 2), (3, 1))
    assert heads.heads_in(3) == [1]


def test_file_of_pairs_and_selection_json(tmp_path):
    (tmp_path / "h.json").write_text(json.dumps([[1, 2], [0, 0]]))
    (tmp_path / "sel.json").write_text(json.dumps({"heads": [[2, 1]], "method": "greedy"}))
    assert parse_head_spec(str(tmp_path / "h.json"), GEOMETRY).pairs == ((0, 0), (1, 2))
    assert parse_head_spec(str(tmp_path / "sel.json"), GEOMETRY).pairs == ((2, 1),)


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("layers:4", "layer 4 does not exist"),
        ("heads:1.3", "head 3 of layer 1 does not exist"),
        ("heads:x", "is not layer.head"),
        ("layers:a-b", "is not a layer number or range"),
        ("bogus", "is not understood"),
    ],
)
def test_unknown_heads_are_named(spec, message):
    with pytest.raises(HeadSpecError, match=message):
        parse_head_spec(spec, GEOMETRY)


def test_empty_head_set_is_refused():
    with pytest.raises(HeadSpecError, match="empty"):
        HeadSet.of([])


def test_a_huge_layer_range_is_refused_before_any_pair_is_made(monkeypatch):
    made = []
    original = HeadSet.of.__func__

    def counting(cls, pairs):
        pairs = list(pairs)
        made.append(len(pairs))
        return original(cls, pairs)

    monkeypatch.setattr(HeadSet, "of", classmethod(counting))
    with pytest.raises(HeadSpecError, match=r"layer 100000000 does not exist: the model has layers 0\.\.3"):
        parse_head_spec("layers:0-100000000", GEOMETRY)
    assert made == []


def test_a_reversed_layer_range_is_refused():
    with pytest.raises(HeadSpecError, match=r"'3-1' is an empty range"):
        parse_head_spec("layers:3-1", GEOMETRY)


@pytest.mark.parametrize("content", ['[[0, "a"]]', "[[0, 1.5]]", "[[true, 1]]", '{"heads": [[0, null]]}'])
def test_a_head_file_with_a_non_integer_names_the_entry(tmp_path, content):
    path = tmp_path / "heads.json"
    path.write_text(content)
    message = r"head file '.*heads\.json': entry 0 .* is not a pair of integers"
    with pytest.raises(HeadSpecError, match=message):
        parse_head_spec(str(path), GEOMETRY)


def test_a_head_set_counts_itself_in_words_singular_and_plural():
    assert HeadSet.of([(3, 1)]).in_words() == "1 head in 1 layer"
    assert HeadSet.of([(0, 0), (0, 1), (2, 0)]).in_words() == "3 heads in 2 layers"
