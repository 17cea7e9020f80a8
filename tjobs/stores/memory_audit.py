"""The memory twin's audit log (:class:`tjobs.stores.contracts.audit.AuditLog`): a list in append
order, the before/after documents copied through JSON as a database would."""

from __future__ import annotations

import itertools
from dataclasses import replace
from typing import Any

import orjson

from tjobs.stores.contracts.audit import AuditEntry, AuditLog, AuditQuery, matches


def _copy(value: Any) -> Any:
    return orjson.loads(orjson.dumps(value))


class MemoryAuditLog(AuditLog):
    def __init__(self) -> None:
        self._entries: list[AuditEntry] = []
        self._ids = itertools.count(1)

    async def append_audit(self, entry: AuditEntry) -> int:
        stored = replace(entry, id=next(self._ids), before=_copy(entry.before), after=_copy(entry.after))
        self._entries.append(stored)
        return stored.id

    async def search_audit(self, query: AuditQuery) -> list[AuditEntry]:
        found = (entry for entry in reversed(self._entries) if matches(entry, query))
        return [replace(e, before=_copy(e.before), after=_copy(e.after)) for e in itertools.islice(found, query.limit)]

    async def purge_audit(self, before_ms: int, limit: int) -> int:
        gone = [entry.id for entry in self._entries if entry.at_ms < before_ms][:limit]
        doomed = set(gone)
        self._entries = [entry for entry in self._entries if entry.id not in doomed]
        return len(gone)
