"""Pages of a listing and their opaque cursors: the position of the last item listed.

A cursor is URL-safe base64 of a JSON array, ``[kind, *position]``; ``kind`` names the listing and
its order, so a cursor from one listing is refused by another (422 ``bad_cursor`` naming the field).
Positions hold strings and 64-bit integers only, checked on the way in, before any store sees them.
"""

from __future__ import annotations

import base64
import binascii
from dataclasses import dataclass
from typing import Any

import orjson

from tjobs.errors import InvalidInput
from tjobs.model import MAX_ID

MAX_CURSOR_CHARS = 1000
LIST_PAGE_MAX = 1000  # items per page at most, in every listing

Position = tuple[str | int, ...]


@dataclass(frozen=True, slots=True)
class Page:
    """One page of a listing; ``next_cursor`` is ``None`` only at the end (a page may be short)."""

    items: list[Any]
    next_cursor: str | None


def encode_position(kind: str, position: Position) -> str:
    return base64.urlsafe_b64encode(orjson.dumps([kind, *position])).decode().rstrip("=")


def decode_position(cursor: str, kind: str, shape: tuple[type, ...], field: str = "cursor") -> Position:
    """The position a cursor of ``kind`` carries, one value per type of ``shape`` (``str`` or ``int``)."""
    refused = InvalidInput(field, "not a cursor this API returned", "bad_cursor")
    if len(cursor) > MAX_CURSOR_CHARS:
        raise refused
    try:
        values = orjson.loads(base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)))
    except (ValueError, binascii.Error, orjson.JSONDecodeError):
        raise refused from None
    if not isinstance(values, list) or len(values) != len(shape) + 1 or values[0] != kind:
        raise refused
    position: list[str | int] = []
    for value, expected in zip(values[1:], shape, strict=True):
        if type(value) is not expected or not isinstance(value, str | int):
            raise refused
        if isinstance(value, int) and not 0 <= value <= MAX_ID:
            raise refused
        position.append(value)
    return tuple(position)
