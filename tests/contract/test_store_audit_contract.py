"""The audit log: entries appended with increasing ids, searched newest first by every filter and paged
by id, and purged oldest first past a cut-off."""

from __future__ import annotations

import secrets
from dataclasses import replace

import pytest

from tjobs.stores.audit_store import audit_log_of
from tjobs.stores.base import TaskStore
from tjobs.stores.contracts.audit import AuditEntry, AuditQuery

pytestmark = pytest.mark.asyncio

NOW_MS = 1_790_000_000_000


def _app() -> str:
    return f"app-{secrets.token_hex(4)}"  # each test's rows apart from the others' (the table is not wiped)


def _entry(app_id: str | None, action: str = "task.pause", **changes: object) -> AuditEntry:
    entry = AuditEntry(
        at_ms=NOW_MS,
        actor_kind="app_key",
        actor_name=app_id or "admin",
        app_id=app_id,
        action=action,
        object_id="42",
        before={"status": "active"},
        after={"status": "paused"},
        source="10.0.0.7",
        via="api",
        request_id="req-1",
    )
    return replace(entry, **changes)  # type: ignore[arg-type]


async def test_an_entry_is_read_back_as_appended_with_a_growing_id(store: TaskStore) -> None:
    audit = audit_log_of(store)
    app = _app()
    first = await audit.append_audit(_entry(app))
    second = await audit.append_audit(_entry(app, "task.update", before={"name": "a"}, after={"name": "b"}))
    assert second > first > 0
    found = await audit.search_audit(AuditQuery(app_id=app))
    assert [entry.id for entry in found] == [second, first]  # newest first
    assert found[1] == replace(_entry(app), id=first)
    assert (found[0].before, found[0].after) == ({"name": "a"}, {"name": "b"})


async def test_an_entry_of_no_app_is_found_by_the_empty_app(store: TaskStore) -> None:
    audit = audit_log_of(store)
    object_id = f"shard-{secrets.token_hex(4)}"
    appended = await audit.append_audit(_entry(None, "shards.move", object_id=object_id, before=None))
    found = await audit.search_audit(AuditQuery(app_id="", object_id=object_id))
    assert [(entry.id, entry.app_id, entry.before) for entry in found] == [(appended, None, None)]


async def test_every_filter_narrows_the_search(store: TaskStore) -> None:
    audit = audit_log_of(store)
    app = _app()
    pause = await audit.append_audit(_entry(app, at_ms=NOW_MS))
    update = await audit.append_audit(_entry(app, "task.update", at_ms=NOW_MS + 10, object_id="43"))
    rotate = await audit.append_audit(_entry(app, "app.rotate_key", at_ms=NOW_MS + 20, actor_name="admin"))
    await audit.append_audit(_entry(_app()))

    async def ids(**filters: object) -> list[int]:
        return [entry.id for entry in await audit.search_audit(AuditQuery(app_id=app, **filters))]  # type: ignore[arg-type]

    assert await ids() == [rotate, update, pause]
    assert await ids(actor="admin") == [rotate]
    assert await ids(action_prefix="task.") == [update, pause]
    assert await ids(action_prefix="task.update") == [update]
    assert await ids(action_prefix="task%") == []  # a prefix is literal, not a pattern
    assert await ids(since_ms=NOW_MS + 10) == [rotate, update]
    assert await ids(until_ms=NOW_MS + 10) == [pause]
    assert await ids(object_id="43") == [update]


async def test_pages_follow_the_id_down(store: TaskStore) -> None:
    audit = audit_log_of(store)
    app = _app()
    appended = [await audit.append_audit(_entry(app, object_id=str(n))) for n in range(5)]
    first = await audit.search_audit(AuditQuery(app_id=app, limit=2))
    second = await audit.search_audit(AuditQuery(app_id=app, limit=2, before_id=first[-1].id))
    last = await audit.search_audit(AuditQuery(app_id=app, limit=2, before_id=second[-1].id))
    assert [entry.id for entry in first + second + last] == appended[::-1]


async def test_a_purge_deletes_the_oldest_past_the_cut_off_up_to_its_limit(store: TaskStore) -> None:
    audit = audit_log_of(store)
    app = _app()
    old = [await audit.append_audit(_entry(app, at_ms=1_000 + n)) for n in range(3)]
    kept = await audit.append_audit(_entry(app, at_ms=NOW_MS))
    while await audit.purge_audit(before_ms=1_002, limit=1):  # other tests' rows are all newer
        pass
    assert [entry.id for entry in await audit.search_audit(AuditQuery(app_id=app))] == [kept, old[2]]
    assert await audit.purge_audit(before_ms=1_003, limit=10) == 1
    assert [entry.id for entry in await audit.search_audit(AuditQuery(app_id=app))] == [kept]
