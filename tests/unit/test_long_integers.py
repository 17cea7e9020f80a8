"""A request body's integers beyond 64 bits: the quick scan of the raw bytes for a run of 19 digits (which
decides whether the slow walk that names the field runs) finds one exactly where a regex search does."""

from __future__ import annotations

import re

import pytest

from tjobs.api.bodies import has_long_digit_run, parse_json
from tjobs.errors import InvalidInput

SAMPLES = [
    b"",
    b"1" * 18,
    b"1" * 19,
    b"x" + b"9" * 19 + b"x",
    b"1" * 18 + b"." + b"1" * 18,
    b'{"at_ms":1790000000000,"name":"t-123456789012345678"}',
    b'{"a":"123456789012345678901"}',  # in a string: found, and the walk finds no integer
    bytes(range(256)) * 3,
    "٠١٢٣٤٥٦٧٨٩٠١٢٣٤٥٦٧٨٩".encode(),  # non-ASCII digits are no JSON digits
]


@pytest.mark.parametrize("raw", SAMPLES)
def test_the_quick_scan_agrees_with_a_regex_search(raw: bytes) -> None:
    assert has_long_digit_run(raw) is (re.search(rb"[0-9]{19}", raw) is not None)


def test_an_integer_beyond_64_bits_in_a_batch_is_refused_naming_its_field() -> None:
    body = b'{"tasks":[{"payload":{"i":1}},{"payload":{"i":18446744073709551616}}]}'
    with pytest.raises(InvalidInput) as refused:
        parse_json(body, 32)
    assert refused.value.field == "tasks[1].payload.i"
    assert refused.value.code == "out_of_range"
    assert parse_json(b'{"tasks":[{"payload":{"i":18446744073709551615}}]}', 32) == {
        "tasks": [{"payload": {"i": 18446744073709551615}}]
    }
