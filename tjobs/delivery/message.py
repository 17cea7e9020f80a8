"""The callback message of one flow: destinations, method, headers and body, built once and signed per attempt.

A flow's destinations are its inline URLs, or its named targets tracked as ``target:<name>``
(:func:`tjobs.targets.model.tracking_key`), or an executor pool tracked as ``pool:<name>`` (expanded
per attempt by :mod:`tjobs.delivery.pool_dispatcher`): the same signed headers and body go to each; a target's
own request settings (address, method, headers, credentials) are applied by the transport
(:mod:`tjobs.delivery.router`) from :attr:`tjobs.delivery.transport.CallbackRequest.target`.

Headers sent on every attempt (Standard Webhooks plus tjobs' own):

* ``webhook-id`` — the flow id, identical on every attempt: the receiver's idempotency key;
* ``webhook-timestamp`` — the attempt's send time in epoch seconds (receivers reject stale ones);
* ``webhook-signature`` — ``v1,<sig>`` per app secret, space-separated while a secret rotates;
* ``tjobs-task-id``, ``tjobs-scheduled-at`` (epoch ms), ``tjobs-attempt`` (1-based);
* ``tjobs-run: report`` when the task's callback says ``run_on_publish`` (the broker's acknowledgement
  starts a run; the consumer reports its end: :mod:`tjobs.delivery.run_start`);
* the task's own ``headers``, and ``content-type`` unless the task sets it.

The body is the task's ``callback.body`` verbatim when given (``content-type`` defaults to JSON if it
looks like JSON, else text). Otherwise it is the JSON envelope ``{"flow_id", "task_id", "task_name",
"scheduled_at", "scheduled_at_ms", "attempt", "payload"}`` (ids as strings: 63-bit ids do not fit a
JavaScript number), except for ``GET``, which carries no default body. ``payload`` is the flow's own
(:attr:`tjobs.model.Flow.payload_json`, a trigger's override) when it has one, else the task's.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import orjson

from tjobs.clock import iso_ms
from tjobs.delivery.allow_list import allow_list_of_app
from tjobs.delivery.run_start import RUN_HEADER, RUN_REPORT
from tjobs.delivery.signing import signature_header
from tjobs.delivery.transport import CallbackRequest
from tjobs.model import App, Flow, Task
from tjobs.specs import CallbackSpec
from tjobs.specs.pool import pool_key
from tjobs.targets.model import Target, tracking_key

JSON = "application/json"
TEXT = "text/plain; charset=utf-8"


def destinations_of(spec: CallbackSpec) -> list[str]:
    """A callback's destinations (see the module); raises ``ValueError`` when it has none."""
    destinations = list(spec.urls) if spec.urls else [tracking_key(name) for name in spec.targets]
    if spec.pool is not None:  # an executor pool (tjobs.delivery.pool_dispatcher expands it per attempt)
        destinations = [pool_key(spec.pool.pool)]
    if not destinations:
        raise ValueError("the callback has no destination")
    return destinations


class CallbackMessage:
    """Everything about one flow's callback that does not change between attempts, pre-encoded."""

    __slots__ = (
        "_body",
        "_envelope",
        "_secrets",
        "_static_headers",
        "allow_list",
        "app_id",
        "destinations",
        "flow_id",
        "method",
        "timeout_ms",
    )

    def __init__(self, task: Task, flow: Flow, app: App, flow_id: str, default_timeout_ms: int) -> None:
        spec = task.callback
        self.destinations = destinations_of(spec)
        self.method: str = spec.method.upper()
        self.timeout_ms: int = default_timeout_ms if spec.timeout_ms is None else spec.timeout_ms
        self.app_id = app.id
        self.flow_id = flow_id
        self._secrets = app.secrets
        self.allow_list = allow_list_of_app(app.settings)  # travels with every request, for the target policy
        headers: dict[str, str] = {}
        custom = spec.headers
        has_content_type = False
        if custom:
            headers.update(custom)
            has_content_type = any(name.lower() == "content-type" for name in custom)
        body = spec.body
        task_id = str(task.id)
        self._envelope: dict[str, Any] | None = None
        self._body: bytes | None = None
        if body is not None:
            self._body = body.encode()
            if not has_content_type:
                headers["content-type"] = JSON if self._body.lstrip()[:1] in (b"{", b"[") else TEXT
        elif self.method != "GET":
            self._envelope = {
                "flow_id": flow_id,
                "task_id": task_id,
                "task_name": task.name,
                "scheduled_at": iso_ms(flow.scheduled_at_ms),
                "scheduled_at_ms": flow.scheduled_at_ms,
                "attempt": 0,
                "payload": task.payload if flow.payload_json is None else orjson.loads(flow.payload_json),
            }
            if not has_content_type:
                headers["content-type"] = JSON
        headers["webhook-id"] = flow_id
        headers["tjobs-task-id"] = task_id
        headers["tjobs-scheduled-at"] = str(flow.scheduled_at_ms)
        if spec.run_on_publish:
            headers[RUN_HEADER] = RUN_REPORT
        self._static_headers = headers

    def body_for(self, attempt: int, extra: Mapping[str, Any] | None = None) -> bytes | None:
        if self._envelope is None:
            return self._body
        self._envelope["attempt"] = attempt
        return orjson.dumps({**self._envelope, **extra} if extra else self._envelope)

    def signed(
        self, attempt: int, now_ms: int, extra: Mapping[str, Any] | None = None
    ) -> tuple[dict[str, str], bytes | None]:
        """Headers and body of ``attempt`` sent at ``now_ms``; raises ``ValueError`` without a secret.
        ``extra`` adds keys to the JSON envelope (a pool's shard item), signed with it."""
        body = self.body_for(attempt, extra)
        timestamp_s = now_ms // 1000
        headers = self._static_headers.copy()
        headers["webhook-timestamp"] = str(timestamp_s)
        headers["webhook-signature"] = signature_header(self._secrets, self.flow_id, timestamp_s, body or b"")
        headers["tjobs-attempt"] = str(attempt)
        return headers, body

    def request(self, url: str, attempt: int, headers: dict[str, str], body: bytes | None) -> CallbackRequest:
        return CallbackRequest(
            self.app_id, self.flow_id, url, self.method, headers, body, self.timeout_ms, attempt, self.allow_list
        )

    def target_request(
        self, target: Target, attempt: int, headers: dict[str, str], body: bytes | None, timeout_ms: int
    ) -> CallbackRequest:
        """The request to a named target, tracked as ``target:<name>`` (never its address)."""
        return CallbackRequest(
            self.app_id,
            self.flow_id,
            tracking_key(target.name),
            self.method,
            headers,
            body,
            timeout_ms,
            attempt,
            self.allow_list,
            target,
        )
