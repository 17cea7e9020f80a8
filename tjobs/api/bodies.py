"""Request bodies: bounded while they are read, then parsed as JSON within the documented limits.

:class:`BodyLimitMiddleware` (ASGI) holds every request to ``api.max_body_bytes``
(``api.max_batch_body_bytes`` on the batch create): a ``Content-Length`` over the cap is answered 413
before a byte of the body is read, and a body that grows past it while streaming (chunked, or a lying
client) stops the read at the cap with the same 413 — a node never holds more than the cap of one body.

:func:`parse_json` refuses, with a 422 naming the field: invalid JSON (``body``), nesting deeper than
``limits.max_json_depth`` objects/arrays, and integer literals beyond 64 bits (which a JSON parser would
otherwise turn into imprecise floats). :func:`require_json_content_type` answers 415 for a non-JSON body.
Both extra checks are paid only when a cheap scan of the raw bytes says they could matter.
"""

from __future__ import annotations

import json
from typing import Any

import orjson
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from tjobs.errors import BodyTooLarge, InvalidInput, UnsupportedMediaType
from tjobs.wire import JSON_INTEGER_MAX, JSON_INTEGER_MIN

BATCH_PATHS = frozenset({"/v1/tasks/batch", "/v1/tasks:batch"})
INT_MIN = JSON_INTEGER_MIN  # what a JSON body may hold as an integer (signed 64-bit up to unsigned 64-bit)
INT_MAX = JSON_INTEGER_MAX
_DIGITS_AS_ZERO = bytes(0x30 if 0x30 <= byte <= 0x39 else 0x20 for byte in range(256))  # other bytes: spaces
_LONG_RUN = b"0" * 19  # every integer outside -2^63..2^64-1 has at least 19 digits
_CONTAINERS = (dict, list)  # what JSON nests (orjson's types exactly)


class BodyLimitMiddleware:
    """Refuse request bodies over their cap with 413, counting bytes as they arrive (see the module)."""

    def __init__(self, app: ASGIApp, *, max_body_bytes: int, max_batch_body_bytes: int) -> None:
        self.app = app
        self.max_body_bytes = max_body_bytes
        self.max_batch_body_bytes = max_batch_body_bytes

    def cap_of(self, path: str) -> tuple[int, str]:
        if path in BATCH_PATHS:
            return self.max_batch_body_bytes, "api.max_batch_body_bytes"
        return self.max_body_bytes, "api.max_body_bytes"

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        cap, setting = self.cap_of(scope["path"])
        for name, value in scope["headers"]:
            if name == b"content-length" and (not value.isdigit() or int(value) > cap):
                await _refuse(send, BodyTooLarge(cap, setting))
                return
        received = 0

        async def bounded_receive() -> Message:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > cap:
                    raise BodyTooLarge(cap, setting)
            return message

        await self.app(scope, bounded_receive, send)


async def _refuse(send: Send, error: BodyTooLarge) -> None:
    body = orjson.dumps({"error": {"code": error.code, "message": error.message, "field": error.field}})
    await send(
        {
            "type": "http.response.start",
            "status": error.status_code,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
                (b"connection", b"close"),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})


def require_json_content_type(content_type: str | None) -> None:
    """415 unless ``content_type`` is ``application/json`` or a ``+json`` type (parameters allowed)."""
    media_type = (content_type or "").partition(";")[0].strip().lower()
    if not _is_json(media_type):
        raise UnsupportedMediaType(media_type)


def is_json_media_type(content_type: bytes) -> bool:
    """Whether :func:`require_json_content_type` passes this raw ``Content-Type`` header value."""
    return _is_json(content_type.decode("latin-1").partition(";")[0].strip().lower())


def _is_json(media_type: str) -> bool:
    return media_type == "application/json" or (media_type.startswith("application/") and media_type.endswith("+json"))


def parse_json(raw: bytes, max_depth: int) -> Any:
    """The JSON value of ``raw``, or :class:`InvalidInput` naming the field (see the module)."""
    try:
        value = orjson.loads(raw)
    except orjson.JSONDecodeError as error:
        if "depth" in str(error).lower():
            raise InvalidInput(
                "body", f"nests deeper than {max_depth} objects/arrays (limits.max_json_depth)", "too_deep"
            ) from None
        raise InvalidInput("body", f"not valid JSON ({error.msg})", "bad_json") from None
    if raw.count(b"[") + raw.count(b"{") > max_depth and _deeper_than(value, max_depth):
        _check_depth(value, max_depth)  # depth never exceeds the number of openings; this names the field
    if has_long_digit_run(raw):
        _check_integers(raw)
    return value


def has_long_digit_run(raw: bytes) -> bool:
    """Whether ``raw`` holds 19 ASCII digits in a row: its digits mapped to ``0`` and every other byte to a
    space, then one substring search. A regex search for ``[0-9]{19}`` retries at every digit of every run:
    3.0 ms on the register bench's batch of 1,000 tasks (143 kB), more than parsing it (2.4 ms); this is 0.2 ms."""
    return _LONG_RUN in raw.translate(_DIGITS_AS_ZERO)


def _deeper_than(value: Any, max_depth: int) -> bool:
    """Whether ``value`` nests deeper than ``max_depth``: a walk level by level that keeps no paths (a
    batch of 1,000 tasks always has more openings than the limit; the walk with paths was 6 % of its CPU)."""
    level = [value] if type(value) in _CONTAINERS else []
    depth = 0
    while level:
        depth += 1
        if depth > max_depth:
            return True
        inner: list[Any] = []
        add = inner.append
        for node in level:
            for v in node.values() if type(node) is dict else node:  # a plain loop: a third of a generator's time
                kind = type(v)
                if kind is dict or kind is list:  # _CONTAINERS, spelt out
                    add(v)
        level = inner
    return False


def _check_depth(value: Any, max_depth: int) -> None:
    stack: list[tuple[Any, int, tuple[str | int, ...]]] = [(value, 1, ())]
    while stack:
        node, depth, path = stack.pop()
        if depth > max_depth:
            raise InvalidInput(
                field_of(path), f"nests deeper than {max_depth} objects/arrays (limits.max_json_depth)", "too_deep"
            )
        if isinstance(node, dict):
            stack.extend((v, depth + 1, (*path, k)) for k, v in node.items() if isinstance(v, dict | list))
        elif isinstance(node, list):
            stack.extend((v, depth + 1, (*path, i)) for i, v in enumerate(node) if isinstance(v, dict | list))


def field_of(path: tuple[str | int, ...]) -> str:
    """The request field a deep value belongs to: the top-level key, then any ``[index].key`` pairs
    (``payload``, ``tasks[3].payload``), or ``body`` for the body itself."""
    if not path or not isinstance(path[0], str):
        return "body"
    field = path[0]
    rest = path[1:]
    while len(rest) >= 2 and isinstance(rest[0], int) and isinstance(rest[1], str):
        field += f"[{rest[0]}].{rest[1]}"
        rest = rest[2:]
    return field


class _OutOfRange:
    def __init__(self, literal: str) -> None:
        self.literal = literal


def _checked_int(literal: str) -> int | _OutOfRange:
    number = int(literal)
    return number if INT_MIN <= number <= INT_MAX else _OutOfRange(literal)


def _check_integers(raw: bytes) -> None:
    value = json.loads(raw, parse_int=_checked_int)
    stack: list[tuple[Any, tuple[str | int, ...]]] = [(value, ())]
    while stack:
        node, path = stack.pop()
        if isinstance(node, _OutOfRange):
            name = ".".join(str(p) if isinstance(p, str) else f"[{p}]" for p in path).replace(".[", "[") or "body"
            raise InvalidInput(name, f"integer {node.literal[:30]} is beyond 64 bits", "out_of_range")
        if isinstance(node, dict):
            stack.extend((v, (*path, k)) for k, v in node.items())
        elif isinstance(node, list):
            stack.extend((v, (*path, i)) for i, v in enumerate(node))
