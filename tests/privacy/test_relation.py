from __future__ import annotations

import pytest

from dpmtv.errors import ParameterError
from dpmtv.privacy import AdjacencyRelation, parse_relation


def test_parse_relation_values():
    assert parse_relation("replace-one") is AdjacencyRelation.REPLACE_ONE
    assert parse_relation("add-remove-one") is AdjacencyRelation.ADD_REMOVE_ONE
    assert parse_relation(AdjacencyRelation.REPLACE_ONE) is AdjacencyRelation.REPLACE_ONE
    assert AdjacencyRelation.REPLACE_ONE == "replace-one"


def test_parse_relation_unknown_lists_valid_values():
    with pytest.raises(ParameterError, match="'replace-one', 'add-remove-one'") as info:
        parse_relation("replace_one")
    assert "'replace_one'" in str(info.value)
