"""The audit log: one entry per change made through the API, the console or the CLI.

Entries live beside the apps, in the first logical database, and are **append-only**: nothing updates
one, and the only deletion is the retention pass (:meth:`AuditLog.purge_audit`), which removes the
oldest entries past ``audit.retention_days``. Each entry gets an id, increasing in the order entries
were appended; searches read newest first (descending id) and page by id (keyset).

What an entry holds is decided above the store (:mod:`tjobs.service.audit`): secrets are redacted and
the before/after documents capped before they get here; the store keeps them as given.

The role stands beside :class:`tjobs.stores.base.TaskStore`, over the same databases:
:func:`tjobs.stores.audit_store.audit_log_of` gives a store's (the SQL store's shares its engines; the
memory twin's is a list of its own).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class AuditEntry:
    """One change: ``actor_kind``/``actor_name`` (a :class:`tjobs.api.principal.Principal`) did
    ``action`` (``task.pause``) to ``object_id`` in ``app_id`` (``None``: no app) at ``at_ms``, from
    ``source`` (the client address) through ``via`` (``api``, ``console`` or ``cli``); ``before`` and
    ``after`` are JSON values (``None``: nothing, as before a create or after a delete)."""

    at_ms: int
    actor_kind: str
    actor_name: str
    app_id: str | None
    action: str
    object_id: str
    before: Any
    after: Any
    source: str
    via: str
    request_id: str = ""
    id: int = 0  # given by the store on append


@dataclass(frozen=True, slots=True)
class AuditQuery:
    """Filters of a search, all optional and combined with AND: the app (``""``: entries of no app),
    the actor's name, an action prefix (``task.`` matches ``task.pause``; a whole name matches
    itself), ``since_ms <= at_ms < until_ms``, the object id; and the page: entries with an id below
    ``before_id``, at most ``limit`` of them."""

    app_id: str | None = None
    actor: str | None = None
    action_prefix: str | None = None
    since_ms: int | None = None
    until_ms: int | None = None
    object_id: str | None = None
    before_id: int | None = None
    limit: int = 100


def matches(entry: AuditEntry, query: AuditQuery) -> bool:
    """Whether ``entry`` passes ``query``'s filters (not its page): the memory twin's search, and the
    meaning every store's search must have."""
    return (
        (query.app_id is None or (entry.app_id or "") == query.app_id)
        and (query.actor is None or entry.actor_name == query.actor)
        and (query.action_prefix is None or entry.action.startswith(query.action_prefix))
        and (query.since_ms is None or entry.at_ms >= query.since_ms)
        and (query.until_ms is None or entry.at_ms < query.until_ms)
        and (query.object_id is None or entry.object_id == query.object_id)
        and (query.before_id is None or entry.id < query.before_id)
    )


class AuditLog(ABC):
    """Audit entries in the first logical database. A database that cannot be reached raises
    :class:`tjobs.errors.StorageUnavailable`, and a failed call has written nothing."""

    @abstractmethod
    async def append_audit(self, entry: AuditEntry) -> int:
        """Store ``entry`` (its ``id`` is ignored) and return the id it was given: larger than every id
        given before."""

    @abstractmethod
    async def search_audit(self, query: AuditQuery) -> list[AuditEntry]:
        """The entries passing ``query`` (:func:`matches`), newest first (descending id), at most
        ``query.limit``."""

    @abstractmethod
    async def purge_audit(self, before_ms: int, limit: int) -> int:
        """Delete up to ``limit`` entries with ``at_ms < before_ms``, oldest first; how many went. A
        caller purges until fewer than ``limit`` go."""
