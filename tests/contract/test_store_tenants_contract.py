"""Tenants on the store seam (:class:`tjobs.stores.contracts.Tenants`): apps (stored, replaced, found by
key hash) and named targets (put/get/list/delete, and the count of tasks naming one), proven on every
backend: memory, SQLite, MariaDB. Deleting an app's tasks is in test_store_admin_contract.py."""

from __future__ import annotations

from dataclasses import replace
from types import MappingProxyType

import pytest

from tests.contract.backends import NOW_MS, make_task
from tjobs.errors import NotFound, TargetExists, TargetVersionConflict
from tjobs.model import App, Task, TaskStatus
from tjobs.specs import CallbackSpec
from tjobs.stores.base import TaskStore
from tjobs.targets.model import AmqpTarget, HttpTarget, NatsTarget, RetryPolicy, Target


def amqp_target(name: str = "orders-mq", app_id: str = "app-a", version: int = 1) -> Target:
    return Target(
        app_id=app_id,
        name=name,
        settings=AmqpTarget("amqp://127.0.0.1:5672/", "orders", "fire", persistent=True, mandatory=False),
        version=version,
        retry=RetryPolicy(max_attempts=5, backoff_base_ms=200),
        credentials=MappingProxyType({"username": "tjobs", "password": "s3cret-value"}),
        created_at_ms=NOW_MS,
        updated_at_ms=NOW_MS + version,
    )


def naming(task: Task, *targets: str) -> Task:
    return replace(task, callback=CallbackSpec((), targets=targets, max_attempts=3))


async def test_a_target_is_created_once_read_back_whole_and_listed_by_name(store: TaskStore) -> None:
    target = amqp_target()
    await store.put_target(target, None)
    with pytest.raises(TargetExists):
        await store.put_target(replace(target, settings=NatsTarget(("nats://127.0.0.1:4222",), "x")), None)

    stored = await store.get_target("app-a", "orders-mq")
    assert stored == target
    assert stored is not None and dict(stored.credentials) == {"username": "tjobs", "password": "s3cret-value"}
    http = Target("app-a", "hook", HttpTarget(("https://a.example/x", "https://b.example/y"), "PUT", {"x-a": "1"}, 900))
    await store.put_target(http, None)
    await store.put_target(amqp_target("orders-mq", app_id="app-b"), None)  # the same name, another app

    assert await store.get_target("app-a", "hook") == http
    assert [t.name for t in await store.list_targets("app-a", None, 10)] == ["hook", "orders-mq"]
    assert [t.name for t in await store.list_targets("app-a", "hook", 10)] == ["orders-mq"]
    assert [t.name for t in await store.list_targets("app-a", None, 1)] == ["hook"]
    assert [t.app_id for t in await store.list_targets("app-b", None, 10)] == ["app-b"]
    assert await store.get_target("app-c", "orders-mq") is None


async def test_an_update_lands_only_at_the_version_it_read(store: TaskStore) -> None:
    await store.put_target(amqp_target(), None)
    changed = replace(amqp_target(version=2), settings=AmqpTarget("amqp://127.0.0.1:5672/", "billing", "due"))
    await store.put_target(changed, 1)
    assert await store.get_target("app-a", "orders-mq") == changed

    with pytest.raises(TargetVersionConflict) as conflict:
        await store.put_target(amqp_target(version=2), 1)
    assert conflict.value.actual == 2
    with pytest.raises(NotFound):
        await store.put_target(amqp_target("missing", version=2), 1)
    assert await store.get_target("app-a", "orders-mq") == changed


async def test_delete_says_whether_the_target_existed(store: TaskStore) -> None:
    await store.put_target(amqp_target(), None)
    assert await store.delete_target("app-b", "orders-mq") is False
    assert await store.delete_target("app-a", "orders-mq") is True
    assert await store.delete_target("app-a", "orders-mq") is False
    assert await store.get_target("app-a", "orders-mq") is None


async def test_the_reference_count_follows_every_write_of_the_tasks_naming_the_target(store: TaskStore) -> None:
    tables = store.topology.tables_per_database
    unicast = await store.insert_task(naming(make_task(shard=0), "orders-mq"))
    multicast = await store.insert_task(naming(make_task(shard=tables + 1), "orders-mq", "audit"))
    paused = await store.insert_task(naming(make_task(shard=1, status=TaskStatus.PAUSED), "orders-mq"))
    await store.insert_task(naming(make_task(shard=2, status=TaskStatus.COMPLETED), "orders-mq"))  # fires no more
    await store.insert_task(make_task(shard=0))  # inline HTTP
    await store.insert_task(naming(make_task(shard=0, app_id="app-b"), "orders-mq"))  # another app's namesake
    batch = await store.insert_tasks(
        [naming(make_task(shard=3), "orders-mq"), naming(make_task(shard=tables), "audit"), make_task(shard=3)]
    )
    assert all(isinstance(item, Task) for item in batch)

    assert await store.count_target_references("app-a", "orders-mq") == 4
    assert await store.count_target_references("app-a", "audit") == 2
    assert await store.count_target_references("app-b", "orders-mq") == 1
    assert await store.count_target_references("app-a", "nothing") == 0
    assert (await store.get_task(multicast.id)).callback.targets == ("orders-mq", "audit")  # type: ignore[union-attr]

    # an edit of the callback moves the references; an edit of anything else keeps them
    inline = replace(unicast, callback=make_task().callback)
    await store.edit_task(inline, {"callback"})
    await store.edit_task(replace(multicast, name="renamed"), {"name"})
    await store.edit_task(naming(paused, "audit"), {"callback"})
    assert await store.count_target_references("app-a", "orders-mq") == 2
    assert await store.count_target_references("app-a", "audit") == 3
    await store.edit_task(naming(inline, "orders-mq"), {"callback"})
    assert await store.count_target_references("app-a", "orders-mq") == 3

    # deletes take theirs along
    assert await store.delete_task(multicast.id)
    assert await store.delete_task_cancelling_flows(unicast.id, NOW_MS)
    assert await store.count_target_references("app-a", "orders-mq") == 1
    assert await store.count_target_references("app-a", "audit") == 2


async def test_a_purged_task_leaves_no_reference_behind(store: TaskStore) -> None:
    done = await store.insert_task(naming(make_task(shard=0, status=TaskStatus.COMPLETED), "orders-mq"))
    assert await store.purge(0, NOW_MS + 1, 100) == 1
    assert await store.get_task(done.id) is None
    # the same id stored again as an active task counts once: no reference of the purged one is left
    await store.insert_task(replace(done, status=TaskStatus.ACTIVE))
    assert await store.count_target_references("app-a", "orders-mq") == 1


# ---- apps ---------------------------------------------------------------------------------------


async def test_apps_are_stored_replaced_and_found_by_key_hash(store: TaskStore) -> None:
    app = App("app-a", "Orders", "hash-a", ["s1"], 50.0, 7, NOW_MS, {"tz": "UTC"})
    await store.put_app(app)
    await store.put_app(App("app-b", "Refunds", "hash-b", ["s2"]))
    assert await store.get_app("app-a") == app
    assert await store.find_app_by_key_hash("hash-b") == App("app-b", "Refunds", "hash-b", ["s2"])
    assert await store.find_app_by_key_hash("nope") is None

    renamed = replace(app, name="Orders v2", secrets=["s3", "s1"], api_key_hash="hash-a2")
    await store.put_app(renamed)
    assert await store.get_app("app-a") == renamed
    assert await store.find_app_by_key_hash("hash-a") is None
    assert [a.id for a in await store.list_apps()] == ["app-a", "app-b"]
    assert await store.get_app("missing") is None
