"""The sync and async clients are one SDK: the same methods, signatures and requests, sync or awaited."""

from __future__ import annotations

import inspect
from typing import Any

import httpx
import pytest

from tjobs.client import AsyncClient, Client

LIFECYCLE = {"close", "aclose"}


def public_methods(cls: type) -> dict[str, Any]:
    return {name: getattr(cls, name) for name in dir(cls) if not name.startswith("_") and name not in LIFECYCLE}


def test_both_clients_have_the_same_methods_with_the_same_signatures_and_docs() -> None:
    sync, asynchronous = public_methods(Client), public_methods(AsyncClient)
    assert sorted(sync) == sorted(asynchronous)
    assert len(sync) == 48  # 36 + audit + the flow count and the dead letters' count, redrive job, job, jobs, cancel
    # + request (any route: the CLI's users, tokens and alerts) + start_backfill
    # + report_run, append_run_log, cancel_run (job runs)
    for name, method in sync.items():
        other = asynchronous[name]
        returns = inspect.signature(method).return_annotation
        assert inspect.signature(other).replace(return_annotation=returns) == inspect.signature(method), name
        assert (method.__doc__, method.__qualname__) == (other.__doc__, other.__qualname__.replace("Async", "")), name
        if name.startswith("iter_"):
            assert inspect.isgeneratorfunction(method) and inspect.isasyncgenfunction(other), name
            assert inspect.signature(other).return_annotation == "Async" + returns, name
        else:
            assert not inspect.iscoroutinefunction(method) and inspect.iscoroutinefunction(other), name
            assert inspect.signature(other).return_annotation == returns != inspect.Signature.empty, name


def echo(request: httpx.Request) -> httpx.Response:
    """Answers every request with what it was: the method, the path, the query and the body."""
    body = request.content.decode() or None
    seen = {"method": request.method, "path": request.url.path, "query": str(request.url.query), "body": body}
    return httpx.Response(200, json={"items": [], "next_cursor": None, "seen": seen})


CALLS: list[tuple[str, tuple[Any, ...], dict[str, Any]]] = [
    ("list_tasks", (), {"status": "active", "kind": "cron", "limit": 5, "key": "k"}),
    ("search_flows", (), {"from_": 1, "to": "2026-01-01T00:00:00Z", "task_id": "9"}),
    ("list_flows", ("7",), {"before_ms": 3}),
    ("dead_letters", (), {"cursor": "c"}),
    ("list_apps", (), {}),
    ("list_targets", (), {"limit": 1}),
    ("slo", ("5m",), {"app_id": "a/b"}),
    ("health", (), {}),
    ("request", ("PATCH", "/v1/users/a"), {"json": {"disabled": True}, "params": {"x": 1, "y": None}}),
]


@pytest.mark.parametrize(("name", "args", "kwargs"), CALLS, ids=[c[0] for c in CALLS])
async def test_both_clients_send_the_same_request(name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
    sent: list[httpx.Request] = []

    def handle(request: httpx.Request) -> httpx.Response:
        sent.append(request)
        return echo(request)

    with Client("http://t", "k", transport=httpx.MockTransport(handle)) as sync:
        getattr(sync, name)(*args, **kwargs)
    async with AsyncClient("http://t", "k", transport=httpx.MockTransport(handle)) as asynchronous:
        await getattr(asynchronous, name)(*args, **kwargs)
    first, second = sent
    assert (first.method, str(first.url), first.content) == (second.method, str(second.url), second.content)


async def test_the_async_iteration_follows_cursors_as_the_sync_one() -> None:
    cursors: list[str | None] = []

    def handle(request: httpx.Request) -> httpx.Response:
        cursor = request.url.params.get("cursor")
        cursors.append(cursor)
        following = {None: "c1", "c1": "c2", "c2": None}[cursor]
        return httpx.Response(200, json={"items": [], "next_cursor": following})

    with Client("http://t", transport=httpx.MockTransport(handle)) as sync:
        assert list(sync.iter_dead_letters(page_size=2)) == []
    async with AsyncClient("http://t", transport=httpx.MockTransport(handle)) as asynchronous:
        assert [flow async for flow in asynchronous.iter_dead_letters(page_size=2)] == []
    assert cursors == [None, "c1", "c2"] * 2


async def test_both_clients_ask_for_task_health_and_page_a_tasks_history_newer() -> None:
    figures: dict[str, Any] = {
        "last_status": "dead",
        "last_scheduled_at": None,
        "last_changed_at": None,
        "last_changed_at_ms": None,
    }
    figures |= {"last_attempts": 3, "window_s": 86_400, "delivered": 2, "failed": 1, "open": 0, "counted": 3}
    figures |= {"capped": False, "success_rate": 0.6667}
    task: dict[str, Any] = {"id": "1", "name": "t", "key": None, "status": "active", "schedule": {"kind": "delay"}}
    task |= {"callback": {"url": "http://r/"}, "misfire_policy": "fire_now", "delivery": "at_least_once"}
    task |= {"next_run_at": None, "next_run_at_ms": None, "version": 1, "fire_count": 3}
    task |= {"created_at": "2026-01-01T00:00:00Z", "updated_at": "2026-01-01T00:00:00Z", "health": figures}
    queries: list[str] = []

    def handle(request: httpx.Request) -> httpx.Response:
        queries.append(f"{request.url.path}?{request.url.query.decode()}")
        return httpx.Response(200, json={"items": [task] if request.url.path == "/v1/tasks" else []})

    with Client("http://t", "k", transport=httpx.MockTransport(handle)) as sync:
        (listed,) = sync.list_tasks(health=True).items
        assert [t.id for t in sync.iter_tasks(health=True)] == ["1"]
        assert sync.list_flows("7", after_ms=5) == []
    async with AsyncClient("http://t", "k", transport=httpx.MockTransport(handle)) as asynchronous:
        (also,) = (await asynchronous.list_tasks(health=True)).items
        assert await asynchronous.list_flows("7", limit=2, after_ms=5) == []
    assert listed == also and listed.health is not None
    assert (listed.health.last_status, listed.health.failed, listed.health.success_rate) == ("dead", 1, 0.6667)
    assert queries == [
        "/v1/tasks?limit=100&health=true",
        "/v1/tasks?limit=500&health=true",
        "/v1/tasks/7/flows?limit=100&after_ms=5",
        "/v1/tasks?limit=100&health=true",
        "/v1/tasks/7/flows?limit=2&after_ms=5",
    ]
