"""Every public name has a docstring: the API reference (docs/reference/api.md) is generated from
them, so a name without one is a blank entry there."""

from __future__ import annotations

import inspect

import pytest

import dpmtv


def _public_members(obj: type) -> list[str]:
    """The class's own public methods and properties (not inherited, not pydantic's or Enum's)."""
    names = []
    for name, member in vars(obj).items():
        if name.startswith("_"):
            continue
        function = member.__func__ if isinstance(member, (classmethod, staticmethod)) else member
        if inspect.isfunction(function) or isinstance(member, property):
            names.append(name)
    return names


@pytest.mark.parametrize("name", [name for name in dpmtv.__all__ if name != "__version__"])
def test_every_public_name_and_its_methods_are_documented(name):
    obj = getattr(dpmtv, name)
    assert inspect.getdoc(obj), f"dpmtv.{name} has no docstring"
    if inspect.isclass(obj):
        bare = [member for member in _public_members(obj) if not inspect.getdoc(getattr(obj, member))]
        assert not bare, f"dpmtv.{name}: methods without a docstring: {bare}"
