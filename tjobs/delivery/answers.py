"""What a receiver answered, as a flow keeps it for its page: headers masked and capped, the body's first
bytes, the newest few sends only.

A transport hands over the answer of every HTTP send as a :class:`tjobs.model.ReceivedAnswer` made by
:func:`received_answer`: at most :data:`tjobs.model.ANSWER_HEADERS_KEPT` headers in the order they
came, each value cut at :data:`tjobs.model.ANSWER_HEADER_CHARS`, and the value of every header whose
name looks like a secret (:func:`is_secret_name`: ``Set-Cookie``, ``Authorization``, anything naming a
token, key, password, session or signature) replaced by :data:`MASKED` before it is kept anywhere; the
body's first :data:`tjobs.model.ANSWER_BODY_BYTES` and how many bytes were read. The deliverer turns
them into :class:`tjobs.model.AttemptAnswer` records (:func:`attempt_answers`) and keeps the newest
:data:`tjobs.model.MAX_ANSWER_RECORDS` with the flow (:func:`answers_appended`), written with the
outcome like the attempt history.

The console shows the request a flow sends with the same masking (:func:`masked_headers`,
:func:`masked_json`: the values of JSON keys that look like secrets).

What it costs the deliverer per send (docs/benchmarks.md, "A flow's answers and the task health"): the
headers decoded and masked (the secret check cached per header name), one record, and its JSON in the
flush; a send with no HTTP answer (a timeout, a refused connection, a broker) adds nothing. Lists
(searches, a task's flows, dead letters) read the column too, but the API shows the answers on
``GET /v1/flows/{id}`` only.
"""

from __future__ import annotations

import functools
import itertools
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from tjobs.model import (
    ANSWER_BODY_BYTES,
    ANSWER_HEADER_CHARS,
    ANSWER_HEADERS_KEPT,
    MAX_ANSWER_RECORDS,
    AttemptAnswer,
    AttemptResult,
    ReceivedAnswer,
)

MASKED = "[masked]"
_SECRET_NAME = re.compile(
    r"(^|[-_.])auth($|[-_.])|authori[sz]ation|authenticat|cookie|token|secret|passw|pwd|api[-_.]?key|"
    r"access[-_.]?key|private[-_.]?key|signature|credential|session",
    re.IGNORECASE,
)


@functools.lru_cache(maxsize=4096)  # receivers send the same few header names: a lookup, not a regex per header
def is_secret_name(name: str) -> bool:
    """A header or JSON key whose value is a credential or could stand for one (masked wherever shown)."""
    return _SECRET_NAME.search(name) is not None


def received_answer(headers: Iterable[tuple[str, str]], body: bytes, body_bytes: int) -> ReceivedAnswer:
    """The answer a transport hands over: the first headers, capped and masked, and the body's first bytes."""
    kept = tuple(
        [
            (name, MASKED if is_secret_name(name) else value[:ANSWER_HEADER_CHARS])
            for name, value in itertools.islice(headers, ANSWER_HEADERS_KEPT)
        ]
    )
    return ReceivedAnswer(kept, body[:ANSWER_BODY_BYTES], body_bytes)


def received_raw_answer(headers: Sequence[tuple[bytes, bytes]], body: bytes, body_bytes: int) -> ReceivedAnswer:
    """:func:`received_answer` of headers as the parser gave them (bytes, at most the kept count already)."""
    kept = []
    for name, value in headers:
        shown, secret = _raw_name(name)
        kept.append((shown, MASKED if secret else value[:ANSWER_HEADER_CHARS].decode("latin-1")))
    return ReceivedAnswer(tuple(kept), body[:ANSWER_BODY_BYTES], body_bytes)


@functools.lru_cache(maxsize=4096)
def _raw_name(name: bytes) -> tuple[str, bool]:
    text = name.decode("latin-1")
    return text, is_secret_name(text)


def attempt_answers(results: Sequence[AttemptResult], task_revision: int) -> list[AttemptAnswer]:
    """The answers of one attempt's sends that got one (a send with no HTTP answer keeps none)."""
    return [
        AttemptAnswer(
            r.attempt,
            r.url,
            r.status,
            r.answer.headers,
            r.answer.body.decode("utf-8", "replace"),
            r.answer.body_bytes,
            task_revision,
        )
        for r in results
        if r.answer is not None and r.status is not None
    ]


def answers_appended(kept: tuple[AttemptAnswer, ...] | None, new: Sequence[AttemptAnswer]) -> tuple[AttemptAnswer, ...]:
    """The newest :data:`tjobs.model.MAX_ANSWER_RECORDS` of ``kept`` then ``new``, oldest first."""
    return (*(kept or ()), *new)[-MAX_ANSWER_RECORDS:]


def masked_headers(headers: Mapping[str, str]) -> list[tuple[str, str]]:
    """``headers`` in order, the value of each secret-looking one replaced by :data:`MASKED`."""
    return [(name, MASKED if is_secret_name(name) else value) for name, value in headers.items()]


def masked_json(value: Any) -> Any:
    """``value`` with the value of every object key that looks like a secret replaced, at any depth."""
    if isinstance(value, dict):
        return {key: MASKED if is_secret_name(key) else masked_json(item) for key, item in value.items()}
    if isinstance(value, list):
        return [masked_json(item) for item in value]
    return value
