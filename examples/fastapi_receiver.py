"""A tjobs callback receiver in FastAPI: verify the signature, deduplicate by flow id, answer 2xx.

Run it, then point a task's callback at it (in ``tjobs dev`` the demo app may call loopback targets: use
its API key, or add 127.0.0.1 to your app's ``allowed_callback_hosts``)::

    TJOBS_SIGNING_SECRETS=whsec_... uvicorn examples.fastapi_receiver:app --port 9000
    tjobs task create close-order-123 --delay 10s --callback http://127.0.0.1:9000/tjobs/close-order \\
        --payload '{"order": 123}' --api-key $TJOBS_API_KEY

``TJOBS_SIGNING_SECRETS`` is a comma-separated list: during a rotation put the new and the old secret,
and either verifies. tjobs retries until it sees a 2xx, with the same ``webhook-id`` (the flow id) every
time, so a receiver must be idempotent: here a small in-memory set stands in for your database's
unique key on the flow id.
"""

from __future__ import annotations

import json
import os
from typing import Any

from fastapi import FastAPI, HTTPException, Request, Response

from tjobs.client import WebhookVerificationError, verify

app = FastAPI(title="tjobs receiver example")
_done: set[str] = set()  # use a UNIQUE(flow_id) table in production


def _secrets() -> list[str]:
    return [s.strip() for s in os.environ.get("TJOBS_SIGNING_SECRETS", "").split(",") if s.strip()]


@app.post("/tjobs/close-order", status_code=204)
async def close_order(request: Request) -> Response:
    body = await request.body()  # the raw bytes: the signature covers exactly these
    try:
        callback = verify(body, request.headers, _secrets())
    except WebhookVerificationError as error:
        raise HTTPException(status_code=401, detail=str(error)) from None
    if callback.flow_id in _done:
        return Response(status_code=204)  # a retry of a fire we already handled
    try:  # the task's payload as JSON, or its callback.body as given (any text)
        payload: Any = json.loads(body) if body else None
    except ValueError:
        payload = body.decode(errors="replace")
    print(
        f"closing order {payload} for task {callback.task_id}, fire at {callback.scheduled_at_ms} "
        f"(attempt {callback.attempt})"
    )
    _done.add(callback.flow_id)
    return Response(status_code=204)
