"""What an operator filters flows and dead letters by, read once from text (the API's query or body, the
console's form, the CLI's options through the API) into :class:`FlowFilters`, each bad value a
:class:`InvalidInput` naming its field.

- ``status``: a flow status, or ``retrying`` (pending after at least one attempt);
- ``task_id``; ``task_name_prefix``: tasks whose name starts with it; ``target``: tasks whose callback
  names that target;
- ``last_answer``: the last answer's status code: ``none`` (no answer: a timeout, a refused
  connection), a class ``4xx``, or a code ``503``;
- ``window``: the last ``15m``, ``1h``, ``24h`` or ``7d`` (up to now, on the scheduled instant), or
  ``from`` (inclusive) and ``to`` (exclusive): ISO-8601 with an offset, or epoch ms.

The time presets are pure time math: ``now_ms`` is passed in.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

from tjobs.errors import InvalidInput
from tjobs.model import MAX_ID, FlowStatus
from tjobs.service.schedule_preview import parse_instant
from tjobs.stores.queries import NO_ANSWER, AnswerRange
from tjobs.wire import KEY_PATTERN, TARGET_NAME_PATTERN

RETRYING = "retrying"  # a flow status filter of its own: pending flows attempted at least once
FLOW_STATUS_FILTERS: tuple[str, ...] = (*(status.value for status in FlowStatus), RETRYING)
WINDOWS_MS: dict[str, int] = {"15m": 15 * 60_000, "1h": 3_600_000, "24h": 86_400_000, "7d": 7 * 86_400_000}
FILTER_FIELDS = ("status", "task_id", "task_name_prefix", "target", "last_answer", "window", "from", "to")
NO_ANSWER_FILTER = "none"
MAX_TASK_NAME_CHARS = 200

_TARGET_NAME = re.compile(TARGET_NAME_PATTERN)
_NAME_TEXT = re.compile(KEY_PATTERN)  # as the task search's name prefix: no control character
_ANSWER_CLASS = re.compile(r"^[1-5]xx$")
_ANSWER_CODE = re.compile(r"^[1-5][0-9]{2}$")


@dataclass(frozen=True, slots=True)
class FlowFilters:
    """A flow search's filters, checked (every one optional). ``window`` is kept as given, the range
    it stands for already in ``from_ms``/``until_ms``."""

    status: str | None = None
    task_id: int | None = None
    task_name_prefix: str | None = None
    target: str | None = None
    last_answer: str | None = None
    window: str | None = None
    from_ms: int | None = None
    until_ms: int | None = None

    @property
    def answer(self) -> AnswerRange | None:
        return None if self.last_answer is None else answer_range(self.last_answer)

    def to_json(self) -> dict[str, Any]:
        """The filters given, as a job keeps them (``from_ms``/``until_ms`` resolved)."""
        return {name: value for name, value in asdict(self).items() if value is not None}

    @staticmethod
    def from_json(values: Mapping[str, Any]) -> FlowFilters:
        """Filters kept by :meth:`to_json` (trusted: written by this module)."""
        return FlowFilters(**{name: values[name] for name in FlowFilters.__slots__ if name in values})


def answer_range(text: str) -> AnswerRange:
    if text == NO_ANSWER_FILTER:
        return NO_ANSWER
    if _ANSWER_CLASS.fullmatch(text):
        low = int(text[0]) * 100
        return (low, low + 99)
    return (int(text), int(text))


def refuse_blank(values: Mapping[str, str | None], prefix: str = "") -> None:
    """The API's filters: a filter given empty is refused naming it (``prefix`` + its name), as the API has
    always refused ``task_id=``; the console's form, whose empty fields mean "any", does not call this."""
    for name, value in values.items():
        if value is not None and not value.strip():
            raise InvalidInput(prefix + name, "must not be empty: leave the filter out instead")


def parse_flow_filters(values: Mapping[str, str | None], now_ms: int) -> FlowFilters:
    """:class:`FlowFilters` from text values (``None`` or blank: not given), keys of :data:`FILTER_FIELDS`."""

    def given(name: str) -> str | None:
        value = values.get(name)
        return value.strip() or None if value is not None else None

    status = given("status")
    if status is not None and status not in FLOW_STATUS_FILTERS:
        raise InvalidInput("status", f"must be one of {', '.join(FLOW_STATUS_FILTERS)}")
    task_id_text = given("task_id")
    task_id = None
    if task_id_text is not None:
        if not (task_id_text.isascii() and task_id_text.isdigit()) or len(task_id_text) > 19:
            raise InvalidInput("task_id", "must be a task id (digits)", "invalid_type")
        task_id = int(task_id_text)
        if not 0 < task_id <= MAX_ID:
            raise InvalidInput("task_id", "must be a task id (digits)", "invalid_type")
    name_prefix = values.get("task_name_prefix") or None  # kept as typed: a name may start with a space
    if name_prefix is not None and (len(name_prefix) > MAX_TASK_NAME_CHARS or not _NAME_TEXT.fullmatch(name_prefix)):
        raise InvalidInput("task_name_prefix", f"must be at most {MAX_TASK_NAME_CHARS} characters, none a control one")
    target = given("target")
    if target is not None and not _TARGET_NAME.fullmatch(target):
        raise InvalidInput("target", "must be a target name (letters, digits, '.', '_', '-'; at most 64)")
    last_answer = given("last_answer")
    if last_answer is not None:
        last_answer = last_answer.lower()
        known = last_answer == NO_ANSWER_FILTER or _ANSWER_CLASS.fullmatch(last_answer)
        if not known and not _ANSWER_CODE.fullmatch(last_answer):
            raise InvalidInput("last_answer", "must be none, a status class such as 5xx, or a code such as 503")
    window = given("window")
    from_ms = parse_instant(given("from"), "from")
    until_ms = parse_instant(given("to"), "to")
    if window is not None:
        if window not in WINDOWS_MS:
            raise InvalidInput("window", f"must be one of {', '.join(WINDOWS_MS)}")
        if from_ms is not None or until_ms is not None:
            raise InvalidInput("window", "give either a window or from/to, not both", "conflicting_filters")
        from_ms = now_ms - WINDOWS_MS[window]
    if from_ms is not None and until_ms is not None and until_ms <= from_ms:
        raise InvalidInput("to", "must be after from", "out_of_range")
    return FlowFilters(status, task_id, name_prefix, target, last_answer, window, from_ms, until_ms)
