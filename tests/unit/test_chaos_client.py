"""The chaos workload's API client (tests/chaos/workload.py, ChaosClient) books each create by what its
answer promised, against a stand-in API on loopback: 201, 503 storage_unavailable, 503
storage_outcome_unknown, a 5xx that names nothing, a 4xx, and no answer at all."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from aiohttp import web

from testkit.cluster_rig import NodeProc
from testkit.ports import free_port
from tests.chaos.workload import ChaosClient

ANSWERS = [
    (201, {"id": 11}),
    (503, {"error": {"code": "storage_unavailable"}}),
    (503, {"error": {"code": "storage_outcome_unknown", "details": {"task_id": 12}}}),
    (502, "<html>bad gateway</html>"),
    (422, {"error": {"code": "invalid"}}),
]


@pytest.fixture
async def api(request: pytest.FixtureRequest) -> AsyncIterator[tuple[NodeProc, list[dict[str, object]]]]:
    """A stand-in API answering creates, in order, with ``request.param`` (default :data:`ANSWERS`)."""
    seen: list[dict[str, object]] = []
    answers = list(getattr(request, "param", ANSWERS))

    async def apps(request: web.Request) -> web.Response:
        return web.json_response({"id": "app-1", "api_key": "tja_key"}, status=201)

    async def tasks(request: web.Request) -> web.Response:
        seen.append({"auth": request.headers.get("Authorization"), "body": await request.json()})
        status, body = answers.pop(0)
        text = body if isinstance(body, str) else json.dumps(body)
        return web.Response(status=status, text=text, content_type="application/json")

    app = web.Application()
    app.router.add_post("/v1/apps", apps)
    app.router.add_post("/v1/tasks", tasks)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    yield NodeProc(1, port, Path("unused.toml"), Path("unused.log")), seen
    await runner.cleanup()


async def test_each_create_is_booked_by_what_its_answer_promised(
    api: tuple[NodeProc, list[dict[str, object]]],
) -> None:
    node, seen = api
    client = ChaosClient(node, "http://127.0.0.1:9/hook")
    try:
        assert await client.create_app() == "app-1"
        results = [await client.create_at(1_000 + i) for i in range(len(ANSWERS))]
    finally:
        await client.close()
    assert results == [11, None, None, None, None]
    assert list(client.book.tasks) == [11] and list(client.book.unconfirmed) == [12]
    assert (client.book.unanswered_creates, client.book.refused_creates, client.book.unavailable_creates) == (1, 2, 1)
    assert all(call["auth"] == "Bearer tja_key" for call in seen)
    assert seen[0]["body"] == {
        "name": "chaos-at",
        "callback": {"url": "http://127.0.0.1:9/hook"},
        "schedule": {"kind": "at", "at": "1970-01-01T00:00:01.000Z"},
    }


@pytest.mark.parametrize(
    "api",
    [
        [
            (201, {"id": 11}),
            (201, {"id": 11}),  # another request's task
            (503, {"error": {"code": "storage_outcome_unknown", "details": {"task_id": 11}}}),
            (201, {"id": 12}),
        ]
    ],
    indirect=True,
)
async def test_an_id_that_two_answers_name_is_booked_once_and_the_second_answer_kept_as_evidence(
    api: tuple[NodeProc, list[dict[str, object]]],
) -> None:
    # The 2-hour soak of 2026-12-05 counted a phantom whose task was known but whose booked instant was not
    # the one it fired: an answer naming another request's task would do that, and the book overwrote it
    node, _ = api
    client = ChaosClient(node, "http://127.0.0.1:9/hook")
    try:
        await client.create_app()
        results = [await client.create_at(at_ms) for at_ms in (1_000, 2_000, 3_000, 4_000)]
    finally:
        await client.close()
    assert results == [11, None, None, 12]
    assert client.book.tasks[11].instants == [1_000] and not client.book.unconfirmed
    assert [(again.answer, again.task_id, again.instants) for again in client.book.named_twice] == [
        ("acknowledged", 11, [2_000]),
        ("unconfirmed", 11, [3_000]),
    ]


async def test_a_create_nobody_answers_is_unanswered() -> None:
    client = ChaosClient(NodeProc(1, free_port(), Path("unused.toml"), Path("unused.log")), "http://127.0.0.1:9/")
    try:
        assert await client.create_at(1_000) is None
    finally:
        await client.close()
    assert client.book.unanswered_creates == 1 and not client.book.tasks
