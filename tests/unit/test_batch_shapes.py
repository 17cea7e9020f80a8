"""A batch create parses each distinct callback once (:mod:`tjobs.service.task_batches`): the same answer
as parsing every task's callback on its own, for a table of good and bad batches.

Given two task services on the in-memory store with the same clock and the same random ids, when one
creates a batch with the per-batch memo and the other parses every item's callback (the path before it),
then both answer item by item the same: the same tasks (ids, specs, instants) rendered as the API renders
them, and the same field-named errors (``tasks[i].callback...``), code and message.
"""

from __future__ import annotations

import copy
from dataclasses import replace
from typing import Any

import pytest

from tests.contract.backends import NOW_MS
from tests.delivery_fakes import APP
from tjobs.api.render import error_json, task_json
from tjobs.clock import ManualClock
from tjobs.hot_tier.local import LocalHotTier
from tjobs.model import App
from tjobs.service import task_batches
from tjobs.service.tasks import TaskService
from tjobs.settings import Settings
from tjobs.specs import RenderedOnce, ScheduleKind, callback_to_json
from tjobs.stores.memory import MemoryTaskStore

URL = "http://93.184.215.14/hook"  # a public address: the target policy admits it without a lookup
OTHER = "https://[2606:2800:21f:cb07:6820:80da:af6b:8b2c]/x"
AT = {"kind": "at", "at_ms": NOW_MS + 3_600_000}


def item(callback: Any, **extra: Any) -> dict[str, Any]:
    return {"name": "t", "schedule": AT, "callback": callback, **extra}


BATCHES: dict[str, list[Any]] = {
    "one callback, many tasks": [item({"url": URL, "method": "POST"}, payload={"i": i}) for i in range(6)],
    "same keys in another order": [item({"url": URL, "method": "post"}), item({"method": "post", "url": URL})],
    "1, 1.0 and true are not one value": [
        item({"url": URL, "max_attempts": 1}),
        item({"url": URL, "max_attempts": 1.0}),
        item({"url": URL, "max_attempts": True}),
        item({"url": URL, "max_attempts": 1}),
        item({"url": URL, "run_on_publish": False}),
        item({"url": URL, "run_on_publish": 0}),
    ],
    "a bad callback repeated fails each time": [
        item({"url": "ftp://x/y"}),
        item({"url": URL}),
        item({"url": "ftp://x/y"}),
        item({"url": URL, "headers": {"Host": "x"}}),
        item({"url": URL, "headers": {"Host": "x"}}),
    ],
    "callbacks that are not objects": [
        item(URL),
        item(URL),
        item(None),
        item([URL]),
        item({"url": URL}),
    ],
    "many targets, headers, budgets, bodies": [
        item({"urls": [URL, OTHER], "headers": {"x-a": "1"}, "timeout_ms": 2000}),
        item({"urls": [URL, OTHER], "headers": {"x-a": "1"}, "timeout_ms": 2000}),
        item({"urls": [URL, URL]}),
        item({"url": URL, "urls": [URL]}),
        item({"url": URL, "body": "raw", "method": "PUT"}),
        item({"url": URL, "body": 1}),
        item({"url": URL, "unknown": 1}),
        item({"url": URL, "method": "BREW"}),
    ],
    "refused addresses, named by item": [
        item({"url": "http://127.0.0.1:9/x"}),
        item({"url": URL}),
        item({"url": "http://127.0.0.1:9/x"}),
        item({"urls": [URL, "http://10.0.0.1/x"]}),
    ],
    "other fields wrong beside a good callback": [
        item({"url": URL}, name=""),
        item({"url": URL}, misfire_policy="never"),
        item({"url": URL}, schedule={"kind": "at"}),
        {"schedule": AT, "callback": {"url": URL}},
        item({"url": URL}, extra=1),
        "not an object",
        item({"url": URL}),
    ],
    "pools and named targets": [
        item({"pool": "workers"}),
        item({"pool": "workers"}),
        item({"pool": {"name": "workers", "mode": "nope"}}),
        item({"pool": "workers", "url": URL}),
        item({"target": "orders"}),
        item({"targets": ["a", "a"]}),
    ],
}

DEFAULTS_APP = replace(
    APP, settings={"callback_defaults": {"timeout_ms": 1500, "headers": {"x-team": "billing", "x-a": "0"}}}
)


def service() -> TaskService:
    store = MemoryTaskStore()
    settings = Settings(storage={"urls": ["memory://"]})
    tasks = TaskService(store, LocalHotTier(), settings, ManualClock(NOW_MS), store.topology)
    tasks._shards.seed(29)  # the same shards and ids on both sides
    return tasks


def answer(results: list[Any]) -> list[Any]:
    """The items as the batch route renders them (each task's callback rendered once, as there)."""
    callbacks = RenderedOnce(callback_to_json)
    rendered: list[Any] = []
    for result in results:
        if result.error is not None:
            rendered.append((result.error.status_code, error_json(result.error)))
        else:
            rendered.append((result.created, task_json(result.task, callbacks=callbacks)))
    return rendered


async def create(app: App, batch: list[Any], *, memo: bool, monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    with monkeypatch.context() as patch:
        if not memo:  # the path before: every item's callback parsed on its own
            patch.setattr(task_batches.BatchShapes, "callback", lambda self, request: self._parse(request))
        tasks = service()
        await tasks._store.put_app(app)
        return answer(await tasks.create_many(app, copy.deepcopy(batch)))


@pytest.mark.parametrize("app", [APP, DEFAULTS_APP], ids=["plain app", "app with callback defaults"])
@pytest.mark.parametrize("name", list(BATCHES))
async def test_a_batch_answers_as_if_each_callback_were_parsed_alone(
    name: str, app: App, monkeypatch: pytest.MonkeyPatch
) -> None:
    batch = BATCHES[name]
    memoised = await create(app, batch, memo=True, monkeypatch=monkeypatch)
    alone = await create(app, batch, memo=False, monkeypatch=monkeypatch)
    assert memoised == alone
    assert len(memoised) == len(batch)


async def test_the_table_holds_good_and_bad_items_and_errors_name_their_item(monkeypatch: pytest.MonkeyPatch) -> None:
    rendered = await create(APP, BATCHES["a bad callback repeated fails each time"], memo=True, monkeypatch=monkeypatch)
    assert [entry[0] for entry in rendered] == [422, True, 422, 422, 422]
    assert [entry[1]["field"] for entry in rendered if entry[0] == 422] == [
        "tasks[0].callback.url",
        "tasks[2].callback.url",
        "tasks[3].callback.headers.Host",
        "tasks[4].callback.headers.Host",
    ]


async def test_tasks_of_a_batch_share_one_parsed_callback(monkeypatch: pytest.MonkeyPatch) -> None:
    tasks = service()
    results = await tasks.create_many(APP, copy.deepcopy(BATCHES["one callback, many tasks"]))
    specs = {id(result.task.callback) for result in results if result.task is not None}
    assert len(results) == 6 and len(specs) == 1


async def test_each_task_of_a_batch_gets_its_kinds_default_misfire_policy() -> None:
    store = MemoryTaskStore()
    scheduler = {"misfire_default_at": "skip", "misfire_default_cron": "catch_up", "misfire_default_interval": "skip"}
    settings = Settings(storage={"urls": ["memory://"]}, scheduler=scheduler)
    tasks = TaskService(store, LocalHotTier(), settings, ManualClock(NOW_MS), store.topology)
    schedules = [AT, {"kind": "cron", "expr": "* * * * *"}, AT, {"kind": "interval", "every_ms": 60_000}, AT]
    batch = [item({"url": URL}, schedule=schedule) for schedule in schedules]
    batch[2]["misfire_policy"] = "fire_now"  # given: kept
    results = await tasks.create_many(APP, batch)
    assert [r.task.misfire_policy.value for r in results if r.task is not None] == [
        "skip",
        "catch_up",
        "fire_now",
        "skip",
        "skip",
    ]
    shapes = task_batches.BatchShapes(lambda callback: None, lambda: 0, settings.default_misfire_policy)  # type: ignore[arg-type,return-value]
    assert [shapes.default_policy(kind) for kind in ScheduleKind] == [
        settings.default_misfire_policy(kind) for kind in ScheduleKind
    ]


async def test_a_batch_task_holds_each_value_in_its_own_field() -> None:
    tasks = service()
    request = item({"url": URL}, key="k-1", payload={"i": 7}, misfire_policy="skip", delivery="at_most_once")
    (result,) = await tasks.create_many(APP, [request])
    task = result.task
    assert task is not None and result.created and result.error is None
    assert (task.app_id, task.name, task.key, task.payload) == (APP.id, "t", "k-1", {"i": 7})
    assert (task.schedule.kind.value, task.callback.urls) == ("at", (URL,))
    assert (task.misfire_policy.value, task.delivery.value, task.status.value) == ("skip", "at_most_once", "active")
    assert (task.next_run_at_ms, task.created_at_ms, task.updated_at_ms) == (AT["at_ms"], NOW_MS, NOW_MS)
    assert (task.version, task.fire_count, task.revision, task.children) == (1, 0, 1, None)
    assert task.id > 0
