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
    assert len(sync) == 43  # 36 + audit + the flow count and the dead letters' count, redrive job, job, jobs, cancel
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
