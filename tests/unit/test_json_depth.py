"""A request body's nesting limit: the quick level-by-level check agrees with the walk that names the field."""

from __future__ import annotations

from typing import Any

import pytest

from tjobs.api.bodies import _check_depth, _deeper_than
from tjobs.errors import InvalidInput

TASK = {"name": "t", "callback": {"url": "http://x", "headers": {"a": "b"}}, "payload": {"i": [1, {"x": [2]}]}}
SAMPLES: list[Any] = [5, "s", [], {}, [[[]]], {"a": {"b": [{}]}}, [[1], [[2]]], {"tasks": [TASK] * 50}]


@pytest.mark.parametrize("max_depth", range(1, 8))
@pytest.mark.parametrize("value", SAMPLES)
def test_the_quick_depth_check_agrees_with_the_walk_that_names_the_field(value: Any, max_depth: int) -> None:
    try:
        _check_depth(value, max_depth)
        too_deep = False
    except InvalidInput:
        too_deep = True
    assert _deeper_than(value, max_depth) is too_deep
