"""Which store methods a request called: the bad-input table's measure of "reaches storage".

:meth:`StoreCalls.watch` wraps every public method of a store instance (before the node is built on it),
and :class:`RequestScope`, the app's outermost ASGI layer, opens one record per request in a context
variable, so a call is noted on the request that caused it (tasks it spawns inherit the record) and never
on the node's own loops. Reads of the app directory (:class:`tjobs.service.apps.AppDirectory`: the API
key's lookup and the caller's app, cached, read again when the cache expires) are not counted: every
request makes them whatever its input, and they read the caller's own app, never the request's values.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Awaitable, Callable
from contextvars import ContextVar
from types import CodeType, FrameType
from typing import Any, TypeVar

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from tjobs.service.apps import AppDirectory
from tjobs.stores.base import TaskStore

T = TypeVar("T")

_NOTED: ContextVar[list[str] | None] = ContextVar("fuzz_store_calls", default=None)
_APP_DIRECTORY: frozenset[CodeType] = frozenset(
    # every request's own app (a key's lookup runs in a task that concurrent misses share)
    {AppDirectory.authenticate.__code__, AppDirectory._look_up.__code__, AppDirectory._read.__code__}
)


class StoreCalls:
    """The store methods each request served since :meth:`watch` called, in order of the requests."""

    def __init__(self) -> None:
        self.requests: list[list[str]] = []
        # beside each request: its method, the status it was answered with (0: none yet) and its path
        self.answers: list[tuple[str, int, str]] = []

    def watch(self, store: TaskStore) -> TaskStore:
        """Note every call of ``store``'s public methods made while a request is served; returns it."""
        for name in dir(store):
            method = getattr(store, name)
            if not name.startswith("_") and callable(method):
                setattr(store, name, _noted(name, method))
        return store

    async def during(self, request: Awaitable[T]) -> tuple[T, int, list[str]]:
        """``request``'s answer, how many requests the app served meanwhile (0 for one answered below
        ASGI, as a plain executor heartbeat is: :mod:`tjobs.api.lean_heartbeat`) and the store methods
        they called (app directory reads left out)."""
        first = len(self.requests)
        answer = await request
        served = self.requests[first:]
        return answer, len(served), [name for calls in served for name in calls]


class RequestScope:
    """The outermost ASGI layer: one record of store calls per HTTP request, and what it was answered."""

    def __init__(self, app: ASGIApp, calls: StoreCalls) -> None:
        self.app = app
        self.calls = calls

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        noted: list[str] = []
        index = len(self.calls.answers)
        self.calls.answers.append((scope["method"], 0, scope["path"]))
        self.calls.requests.append(noted)

        async def send_noting(message: Message) -> None:
            if message["type"] == "http.response.start":
                self.calls.answers[index] = (scope["method"], message["status"], scope["path"])
            await send(message)

        token = _NOTED.set(noted)
        try:
            await self.app(scope, receive, send_noting)
        finally:
            _NOTED.reset(token)


def _noted(name: str, method: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(method)
    def call(*args: Any, **kwargs: Any) -> Any:
        noted = _NOTED.get()
        if noted is not None and not _from_app_directory(sys._getframe(1)):
            noted.append(name)
        return method(*args, **kwargs)  # a coroutine method's coroutine, awaited by the caller as before

    return call


def _from_app_directory(frame: FrameType | None) -> bool:
    while frame is not None:
        if frame.f_code in _APP_DIRECTORY:
            return True
        frame = frame.f_back
    return False
