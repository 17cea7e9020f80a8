"""The embedded demo: a ready app, a built-in echo receiver, and tasks whose callbacks arrive at once.

``tjobs dev`` mounts :func:`add_demo_routes` on the node's API and calls :func:`bootstrap_demo`, so a
newcomer sees signed callbacks arrive in the log within seconds of starting.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from fastapi import FastAPI, Request

from tjobs.apps import hash_api_key
from tjobs.callbacks.signing import generate_secret, verify
from tjobs.model import App

if TYPE_CHECKING:
    from tjobs.node import Node

logger = logging.getLogger("tjobs.demo")

DEMO_APP_ID = "demo"
ECHO_PATH = "/_demo/echo"


def add_demo_routes(api: FastAPI, node: Node) -> None:
    received: list[dict[str, Any]] = []
    api.state.demo_received = received

    @api.post(ECHO_PATH, include_in_schema=False)
    async def echo(request: Request) -> dict[str, Any]:
        body = await request.body()
        headers = request.headers
        app = node.apps.cached(DEMO_APP_ID)
        signed = app is not None and verify(app.secrets, headers, body)
        scheduled_at_ms = int(headers.get("tjobs-scheduled-at", "0"))
        lateness_ms = node.clock.now_ms() - scheduled_at_ms
        entry = {
            "flow_id": headers.get("webhook-id"),
            "task_id": headers.get("tjobs-task-id"),
            "attempt": headers.get("tjobs-attempt"),
            "lateness_ms": lateness_ms,
            "signature_ok": signed,
        }
        received.append(entry)
        del received[:-1000]
        print(
            f"callback received  task={entry['task_id']} flow={entry['flow_id']} attempt={entry['attempt']} "
            f"late={lateness_ms} ms signature={'ok' if signed else 'BAD'}",
            flush=True,
        )
        return {"ok": True}

    @api.get(ECHO_PATH, include_in_schema=False)
    async def echo_log() -> dict[str, Any]:
        return {"received": received[-100:]}


async def bootstrap_demo(node: Node, api_key: str, base_url: str) -> list[str]:
    """Create (or refresh) the demo app with ``api_key`` and register the demo tasks; return their ids."""
    existing = await node.store.get_app(DEMO_APP_ID)
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
    await node.store.put_app(app)
    node.apps.put(app)
    target = {"url": f"{base_url}{ECHO_PATH}", "method": "POST", "timeout_ms": 2000}
    requests = [
        {"name": "demo-every-10s", "key": "demo-every-10s",
         "schedule": {"kind": "interval", "every_ms": 10_000}, "callback": target,
         "payload": {"hello": "every 10 seconds"}},
        {"name": "demo-in-5s", "schedule": {"kind": "delay", "delay_ms": 5_000}, "callback": target,
         "payload": {"hello": "once, 5 seconds after start"}},
        {"name": "demo-every-minute", "key": "demo-every-minute",
         "schedule": {"kind": "cron", "expr": "* * * * *", "timezone": "UTC"}, "callback": target,
         "payload": {"hello": "at the top of every minute"}},
    ]
    ids = []
    for request in requests:
        created = await node.tasks.create(app, request)
        ids.append(str(created.task.id))
    return ids
