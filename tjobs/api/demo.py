"""The embedded demo: a ready app, a built-in echo receiver, and tasks whose callbacks arrive at once.

``tjobs dev`` mounts :func:`add_demo_routes` on the node's API and calls :func:`bootstrap_demo`, so a
newcomer sees signed callbacks arrive in the log within seconds of starting.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from fastapi import FastAPI, Request

from tjobs.api.deps import request_app
from tjobs.delivery.signing import generate_secret, verify
from tjobs.errors import InvalidInput, NotFound, Unauthorized
from tjobs.model import App
from tjobs.service.apps import hash_api_key

if TYPE_CHECKING:
    from tjobs.node import Node

logger = logging.getLogger("tjobs.api.demo")

DEMO_APP_ID = "demo"
ECHO_PATH = "/_demo/echo"


def add_demo_routes(api: FastAPI, node: Node) -> None:
    received: list[dict[str, Any]] = []
    api.state.demo_received = received

    @api.post(ECHO_PATH, include_in_schema=False)
    async def echo(request: Request) -> dict[str, Any]:
        """A receiver: only callbacks signed with the demo app's secret are logged (401 otherwise)."""
        body = await request.body()
        headers = request.headers
        try:
            app: App | None = await node.apps.get(DEMO_APP_ID)  # the cache, else the store
        except NotFound:
            app = None
        if app is None or not verify(app.secrets, headers, body):
            print(f"callback refused   flow={headers.get('webhook-id')!r}: signature BAD", flush=True)
            raise Unauthorized("not signed with the demo app's secret")
        scheduled_at = headers.get("tjobs-scheduled-at", "")
        if not (scheduled_at.isascii() and scheduled_at.isdigit() and len(scheduled_at) <= 18):
            raise InvalidInput("tjobs-scheduled-at", "must be epoch milliseconds")
        lateness_ms = node.clock.now_ms() - int(scheduled_at)
        entry = {
            "flow_id": headers.get("webhook-id"),
            "task_id": headers.get("tjobs-task-id"),
            "attempt": headers.get("tjobs-attempt"),
            "lateness_ms": lateness_ms,
            "signature_ok": True,
        }
        received.append(entry)
        del received[:-1000]
        print(
            f"callback received  task={entry['task_id']} flow={entry['flow_id']} attempt={entry['attempt']} "
            f"late={lateness_ms} ms signature=ok",
            flush=True,
        )
        return {"ok": True}

    @api.get(ECHO_PATH, include_in_schema=False)
    async def echo_log(request: Request) -> dict[str, Any]:
        """The last callbacks received, for the demo app's key only."""
        app = await request_app(request)
        if app.id != DEMO_APP_ID:
            raise Unauthorized("the demo app's API key is required")
        return {"received": received[-100:]}


async def bootstrap_demo(node: Node, api_key: str, base_url: str) -> list[str]:
    """Create (or refresh) the demo app with ``api_key`` and register the demo tasks; return their ids."""
    existing = await node.app_service.stored(DEMO_APP_ID)
    app = App(
        id=DEMO_APP_ID,
        name="demo",
        api_key_hash=hash_api_key(api_key),
        secrets=existing.secrets if existing else [generate_secret()],
        rate_limit_per_s=100.0,
        max_concurrency=10,
        created_at_ms=existing.created_at_ms if existing else node.clock.now_ms(),
        settings={"allowed_callback_hosts": ["127.0.0.1", "localhost"]},
    )
    await node.app_service.put(app)
    target = {"url": f"{base_url}{ECHO_PATH}", "method": "POST", "timeout_ms": 2000}
    requests = [
        {
            "name": "demo-every-10s",
            "key": "demo-every-10s",
            "schedule": {"kind": "interval", "every_ms": 10_000},
            "callback": target,
            "payload": {"hello": "every 10 seconds"},
        },
        {
            "name": "demo-in-5s",
            "schedule": {"kind": "delay", "delay_ms": 5_000},
            "callback": target,
            "payload": {"hello": "once, 5 seconds after start"},
        },
        {
            "name": "demo-every-minute",
            "key": "demo-every-minute",
            "schedule": {"kind": "cron", "expr": "* * * * *", "timezone": "UTC"},
            "callback": target,
            "payload": {"hello": "at the top of every minute"},
        },
    ]
    ids = []
    for request in requests:
        created = await node.tasks.create(app, request)
        ids.append(str(created.task.id))
    return ids
