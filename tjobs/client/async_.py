"""The asynchronous client (same methods as :class:`tjobs.client.Client`, awaited)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from typing import Any, TypeVar

import httpx

from tjobs.client import _calls as calls
from tjobs.client._calls import Call, target_request, task_request
from tjobs.client._retry import result_of, retry_delay_s
from tjobs.client.errors import TransportError
from tjobs.client.models import (
    App,
    AppDeleted,
    AppStats,
    BatchResult,
    Flow,
    Page,
    RedriveResult,
    SchedulePreview,
    Target,
    Task,
)
from tjobs.client.schedules import Schedule

T = TypeVar("T")


class AsyncClient:
    """``AsyncClient(base_url, api_key)``: every API operation as a typed method.

    Idempotent calls (reads, pause, resume, delete, creates that carry a ``key``) are resent up to
    ``retries`` times after a connection error or a 502/503/504 (or a 429 with ``Retry-After``), with
    jittered exponential backoff; anything else is sent once. Use the admin key for the ``*_app`` calls.
    """

    def __init__(
        self,
        base_url: str = "http://127.0.0.1:8080",
        api_key: str | None = None,
        *,
        timeout_s: float = 10.0,
        retries: int = 2,
        backoff_s: float = 0.2,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        headers = {"authorization": f"Bearer {api_key}"} if api_key else {}
        self._http = httpx.AsyncClient(base_url=base_url, headers=headers, timeout=timeout_s, transport=transport)
        self._retries = retries
        self._backoff_s = backoff_s

    async def aclose(self) -> None:
        await self._http.aclose()

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def _run(self, call: Call[T]) -> T:
        attempt = 0
        while True:
            response: httpx.Response | None = None
            try:
                response = await self._http.request(call.method, call.path, params=call.params or None, json=call.json)
            except httpx.TransportError as error:
                if not call.idempotent or attempt >= self._retries:
                    raise TransportError(f"{call.method} {call.path}: {type(error).__name__}: {error}") from error
            if response is not None:
                delay = retry_delay_s(response, attempt, self._backoff_s)
                if delay is None or not call.idempotent or attempt >= self._retries:
                    return result_of(call, response, attempt > 0)
            else:
                delay = retry_delay_s(None, attempt, self._backoff_s)
            await asyncio.sleep(delay or 0)
            attempt += 1

    # ---- tasks ----------------------------------------------------------------------------------

    async def create_task(
        self,
        name: str,
        schedule: Schedule,
        url: str | None = None,
        *,
        callback: dict[str, Any] | None = None,
        key: str | None = None,
        payload: Any = None,
        misfire_policy: str | None = None,
        delivery: str | None = None,
    ) -> Task:
        return await self._run(
            calls.create_task(
                task_request(
                    name,
                    schedule,
                    url,
                    callback=callback,
                    key=key,
                    payload=payload,
                    misfire_policy=misfire_policy,
                    delivery=delivery,
                )
            )
        )

    async def create_tasks(self, requests: Sequence[dict[str, Any]]) -> BatchResult:
        """Up to 1,000 create bodies (see :func:`tjobs.client.task_request`); one result per item."""
        return await self._run(calls.create_tasks(requests))

    async def get_task(self, task_id: str) -> Task:
        return await self._run(calls.get_task(task_id))

    async def list_tasks(
        self,
        *,
        limit: int = 100,
        cursor: str | None = None,
        status: str | None = None,
        kind: str | None = None,
        name_prefix: str | None = None,
        key: str | None = None,
    ) -> Page[Task]:
        """The app's tasks across every shard: newest first, or by name with ``name_prefix``."""
        return await self._run(calls.list_tasks(limit, cursor, status, kind, name_prefix, key))

    async def iter_tasks(
        self,
        *,
        status: str | None = None,
        kind: str | None = None,
        name_prefix: str | None = None,
        page_size: int = 500,
    ) -> AsyncIterator[Task]:
        cursor: str | None = None
        while True:
            page = await self.list_tasks(
                limit=page_size, cursor=cursor, status=status, kind=kind, name_prefix=name_prefix
            )
            for item in page.items:
                yield item
            if page.next_cursor is None:
                return
            cursor = page.next_cursor

    async def update_task(self, task_id: str, *, version: int | None = None, **fields: Any) -> Task:
        """Change ``name``, ``schedule``, ``callback``, ``payload``, ``misfire_policy`` or ``delivery``;
        with ``version`` (the task's version as read), raise :class:`VersionConflict` if another edit
        (update, pause, resume) landed since; fires never count. Without it the last edit wins."""
        if version is not None:
            fields["version"] = version
        return await self._run(calls.update_task(task_id, fields))

    async def pause_task(self, task_id: str) -> Task:
        return await self._run(calls.pause_task(task_id))

    async def resume_task(self, task_id: str) -> Task:
        return await self._run(calls.resume_task(task_id))

    async def trigger_task(self, task_id: str, *, payload: Any = calls.TASK_PAYLOAD) -> Flow:
        """Fire the task now, with a manual flow of its own; its schedule does not change.

        ``payload`` (any JSON value, ``None`` included: JSON null) is sent instead of the task's payload
        for this flow only, on every attempt; left out, the task's own is sent. It is validated as a
        create's payload; a task whose callback has its own ``body`` or is a ``GET`` refuses it
        (:class:`BadRequest`, ``field == "payload"``). Not resent after a lost answer (a second manual
        flow would fire)."""
        return await self._run(calls.trigger_task(task_id, payload))

    async def delete_task(self, task_id: str) -> None:
        await self._run(calls.delete_task(task_id))

    # ---- flows ----------------------------------------------------------------------------------

    async def search_flows(
        self,
        *,
        status: str | None = None,
        task_id: str | None = None,
        from_: str | int | None = None,
        to: str | int | None = None,
        limit: int = 100,
        cursor: str | None = None,
    ) -> Page[Flow]:
        """The app's flows across every shard, newest first: ``status`` (a flow status or
        ``retrying``), one task's, scheduled in ``[from_, to)`` (ISO-8601 or epoch ms)."""
        return await self._run(calls.search_flows(limit, cursor, status, task_id, from_, to))

    async def iter_flows(
        self,
        *,
        status: str | None = None,
        task_id: str | None = None,
        from_: str | int | None = None,
        to: str | int | None = None,
        page_size: int = 500,
    ) -> AsyncIterator[Flow]:
        cursor: str | None = None
        while True:
            page = await self.search_flows(
                limit=page_size, cursor=cursor, status=status, task_id=task_id, from_=from_, to=to
            )
            for item in page.items:
                yield item
            if page.next_cursor is None:
                return
            cursor = page.next_cursor

    async def list_flows(self, task_id: str, *, limit: int = 100, before_ms: int | None = None) -> list[Flow]:
        return await self._run(calls.list_flows(task_id, limit, before_ms))

    async def get_flow(self, flow_id: str) -> Flow:
        return await self._run(calls.get_flow(flow_id))

    async def dead_letters(self, *, limit: int = 100, cursor: str | None = None) -> Page[Flow]:
        return await self._run(calls.dead_letters(limit, cursor))

    async def iter_dead_letters(self, *, page_size: int = 500) -> AsyncIterator[Flow]:
        cursor: str | None = None
        while True:
            page = await self.dead_letters(limit=page_size, cursor=cursor)
            for item in page.items:
                yield item
            if page.next_cursor is None:
                return
            cursor = page.next_cursor

    async def redrive(self, flow_ids: str | Sequence[str]) -> RedriveResult:
        return await self._run(calls.redrive([flow_ids] if isinstance(flow_ids, str) else flow_ids))

    # ---- schedules ------------------------------------------------------------------------------

    async def preview_schedule(
        self, schedule: Schedule, *, count: int = 10, from_: str | int | None = None
    ) -> SchedulePreview:
        """The next ``count`` instants of ``schedule`` (at or after ``from_``: ISO-8601 or epoch ms),
        as a task registered now would fire, in UTC and in the schedule's zone."""
        return await self._run(calls.preview_schedule(schedule, count, from_))

    # ---- the calling app, and app management (admin key) ---------------------------------------------

    async def app(self) -> App:
        return await self._run(calls.me())

    async def stats(self) -> AppStats:
        return await self._run(calls.stats())

    async def create_app(self, name: str, **fields: Any) -> App:
        return await self._run(calls.create_app({"name": name, **fields}))

    async def get_app(self, app_id: str) -> App:
        return await self._run(calls.get_app(app_id))

    async def update_app(self, app_id: str, **fields: Any) -> App:
        return await self._run(calls.update_app(app_id, fields))

    async def rotate_app(self, app_id: str, *, api_key: bool = True, secret: bool = True, grace_s: int = 86_400) -> App:
        return await self._run(calls.rotate_app(app_id, api_key, secret, grace_s))

    async def list_apps(self, *, limit: int = 100, cursor: str | None = None) -> Page[App]:
        return await self._run(calls.list_apps(limit, cursor))

    async def disable_app(self, app_id: str) -> App:
        """Its key answers 403 and its tasks do not fire until :meth:`enable_app`."""
        return await self._run(calls.disable_app(app_id))

    async def enable_app(self, app_id: str) -> App:
        """Its tasks resume under their misfire policy."""
        return await self._run(calls.enable_app(app_id))

    async def delete_app(self, app_id: str, *, confirm: str) -> AppDeleted:
        """Delete the app with all its tasks and targets; ``confirm`` must repeat ``app_id``."""
        return await self._run(calls.delete_app(app_id, confirm))

    async def app_stats(self, app_id: str) -> AppStats:
        return await self._run(calls.app_stats(app_id))

    # ---- targets --------------------------------------------------------------------------------

    async def create_target(
        self,
        name: str,
        protocol: str,
        settings: dict[str, Any],
        *,
        retry: dict[str, int] | None = None,
        credentials: dict[str, str] | None = None,
    ) -> Target:
        """Create a named target (``protocol``: http, grpc, amqp, nats or redis_stream) the app's tasks
        name with ``callback={"target": name}``; ``credentials`` are stored and never answered."""
        body = target_request(name, protocol, settings, retry=retry, credentials=credentials)
        return await self._run(calls.create_target(body))

    async def get_target(self, name: str) -> Target:
        return await self._run(calls.get_target(name))

    async def list_targets(self, *, limit: int = 100, cursor: str | None = None) -> Page[Target]:
        return await self._run(calls.list_targets(limit, cursor))

    async def update_target(self, name: str, *, version: int | None = None, **fields: Any) -> Target:
        """Replace ``settings``, ``retry`` or ``credentials`` (``{}`` clears them), or ``protocol`` with
        ``settings``; with ``version`` (as read), raise :class:`VersionConflict` if it moved since."""
        if version is not None:
            fields["version"] = version
        return await self._run(calls.update_target(name, fields))

    async def delete_target(self, name: str) -> None:
        """Delete a target; :class:`Conflict` (``code == "target_in_use"``, ``details["tasks"]``) while
        tasks that can still fire name it."""
        await self._run(calls.delete_target(name))

    async def slo(self, window: str | None = None, *, app_id: str | None = None) -> dict[str, Any]:
        """Service levels: the cluster's over ``window`` (``5m``, ``1h``, ``1d``, ``7d``; the same on every
        node), or without it this node's; the admin key names an app with ``app_id`` (default: all)."""
        return await self._run(calls.slo(window, app_id))

    async def health(self) -> dict[str, Any]:
        return await self._run(calls.health())
