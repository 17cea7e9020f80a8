"""Task rows written as MariaDB literals for the inserts of :meth:`tjobs.stores.sql_direct.DirectPool.insert_new`.

asyncmy fills a statement's ``%s`` marks on the client, never on the server: each parameter goes through
its encoder table and the statement through Python's ``%``. For a batch of 1,000 tasks (17,000 values)
that was 7 ms, a fifth of the node's CPU per batched task (issue 29). :class:`TaskRows` writes a task's
row as one f-string instead, in :data:`tjobs.stores.schema.TASK_COLUMNS` order:

- integers in decimal: as an f-string writes an exact ``int`` when every integer column holds one (checked
  by type first, cheaper than a format spec per value), else each by ``format(value, "d")`` (a value that
  is not an ``int`` raises instead);
- a string between single quotes, as it is when it holds none of the characters a MariaDB string
  literal treats specially (backslash, single quote, NUL, LF, CR, Ctrl-Z: :data:`SPECIAL`), otherwise
  through ``escape`` (the connection's own ``escape_string``, which follows the session's
  ``NO_BACKSLASH_ESCAPES`` as asyncmy's parameters do); a double quote needs no escape between single
  quotes, so the JSON columns mostly go as they are;
- ``NULL`` for ``None``;
- strings a batch repeats (the app id, the enum values, the callback's text for tasks sharing its spec)
  quoted once per :class:`TaskRows`, an enum member looked up as itself (its ``value`` is a property,
  a tenth of a microsecond each time).

The values are those of :func:`tjobs.stores.sql_direct.task_values`; the server stores the same row
either way (``tests/integration/test_sql_literals.py`` checks both against MariaDB, in both escape modes).
The order is the column list's, :data:`~tjobs.stores.schema.TASK_COLUMNS`, written once:
``tests/unit/test_task_rows.py`` checks each row against ``task_values`` and ``task_values`` against it.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from enum import StrEnum

from tjobs.model import Task
from tjobs.specs import RenderedOnce, callback_to_text, schedule_to_text
from tjobs.stores.schema import children_to_text, dumps

SPECIAL = re.compile("[\\\\'\x00\n\r\x1a]")
"""The characters that take a string through ``escape``."""


class TaskRows:
    """Rows of tasks as literal text for one connection (its ``escape``); see the module."""

    __slots__ = ("_callbacks", "_escape", "_repeated")

    def __init__(self, escape: Callable[[str], str]) -> None:
        self._escape = escape
        self._repeated: dict[str, str] = {}  # app ids and enum values, quoted
        self._callbacks = RenderedOnce(lambda spec: self.quoted(callback_to_text(spec)))  # quoted once per spec

    def quoted(self, text: str) -> str:
        """``text`` as a string literal."""
        if type(text) is not str:
            raise TypeError(f"a {type(text).__name__} where a string belongs")
        return f"'{text}'" if SPECIAL.search(text) is None else f"'{self._escape(text)}'"

    def _once(self, text: str) -> str:
        """``text`` quoted once per :class:`TaskRows`; an enum member (a ``StrEnum``: it hashes and compares
        as its value) is looked up as itself, its ``value`` read only the first time."""
        quoted = self._repeated.get(text)
        if quoted is None:
            quoted = self._repeated[text] = self.quoted(text.value if isinstance(text, StrEnum) else text)
        return quoted

    def row(self, task: Task) -> str:
        """``(<id>, <app_id>, ...)``: the task's values in :data:`TASK_COLUMNS` order."""
        next_run = task.next_run_at_ms
        if (
            type(task.id) is not int
            or (type(next_run) is not int and next_run is not None)
            or type(task.version) is not int
            or type(task.fire_count) is not int
            or type(task.created_at_ms) is not int
            or type(task.updated_at_ms) is not int
            or type(task.revision) is not int
        ):
            return self._checked_row(task)  # an int subclass is written, anything else raises there
        quoted, once = self.quoted, self._once
        key, children = task.key, children_to_text(task.children)
        return (
            f"({task.id},{once(task.app_id)},{quoted(task.name)},{'NULL' if key is None else quoted(key)},"
            f"{once(task.status)},{'NULL' if next_run is None else next_run},{task.version},{task.fire_count},"
            f"{quoted(schedule_to_text(task.schedule))},{self._callbacks(task.callback)},"
            f"{quoted(dumps(task.payload))},{once(task.misfire_policy)},{once(task.delivery)},"
            f"{task.created_at_ms},{task.updated_at_ms},{task.revision},"
            f"{'NULL' if children is None else quoted(children)})"
        )

    def _checked_row(self, task: Task) -> str:
        """:meth:`row` with each integer through ``format(value, "d")``: a value that is no ``int`` raises."""
        quoted, once = self.quoted, self._once
        callback = self._callbacks(task.callback)
        key = "NULL" if task.key is None else quoted(task.key)
        next_run = "NULL" if task.next_run_at_ms is None else format(task.next_run_at_ms, "d")
        children = children_to_text(task.children)
        return (
            f"({task.id:d},{once(task.app_id)},{quoted(task.name)},{key},{once(task.status)},{next_run},"
            f"{task.version:d},{task.fire_count:d},{quoted(schedule_to_text(task.schedule))},{callback},"
            f"{quoted(dumps(task.payload))},{once(task.misfire_policy)},{once(task.delivery)},"
            f"{task.created_at_ms:d},{task.updated_at_ms:d},{task.revision:d},"
            f"{'NULL' if children is None else quoted(children)})"
        )
