"""A cancellation asked during a call is raised, even where the call swallowed it (CPython gh-86296).

Python 3.11's :func:`asyncio.wait_for` returns its inner awaitable's result when the task awaiting it
is cancelled just as that awaitable finishes: the cancellation is lost, and the task goes on as if
nobody had asked. Libraries call ``wait_for`` inside their own calls (nats-py's connect, redis-py's
write with a socket timeout, asyncmy's connect; not SQLAlchemy 2.1's pool checkout, which uses
``asyncio.timeout`` on 3.11), so the loss reaches any code that awaits them: an attempt cancelled at
its deadline goes on to publish and wait for an answer with no bound left, or reports a result
although it was cancelled.

:func:`cancellable` awaits such a call and raises :class:`asyncio.CancelledError` if the task's
:meth:`asyncio.Task.cancelling` count rose during it, whatever the call returned or raised. Inside
an ``asyncio.timeout`` block that error becomes the block's :class:`TimeoutError`, as the deadline
meant. A cancellation asked before the call (a task already cleaning up after one) is not raised
again, and one the call itself handled (``uncancel``: an inner ``asyncio.timeout`` that expired) does
not count.

A lost cancellation lands on whoever awaited the call: :func:`cancel_until_done` and :func:`stop_task`
stop a background loop by asking again while it runs on, and :func:`within` bounds a call whose inner
``wait_for`` may swallow the deadline. The audit of every site is in ``docs/design.md`` (Cancellation
and timeouts).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

T = TypeVar("T")


async def cancellable(call: Awaitable[T]) -> T:
    """Await ``call``; raise :class:`asyncio.CancelledError` if the current task was asked to cancel
    meanwhile and ``call`` returned, or raised something else, all the same (see the module docstring)."""
    task = asyncio.current_task()
    if task is None:  # not in a task: nothing can cancel it
        return await call
    asked = task.cancelling()
    try:
        result = await call
    except asyncio.CancelledError:
        raise
    except Exception as failure:
        if task.cancelling() > asked:  # the cancellation, turned into another error
            raise asyncio.CancelledError from failure
        raise
    if task.cancelling() > asked:  # the cancellation, turned into a result
        raise asyncio.CancelledError
    return result


async def cancel_until_done(task: asyncio.Task[Any], every_s: float = 0.1) -> BaseException | None:
    """Cancel ``task`` and wait until it ends, cancelling it again every ``every_s`` while it runs on
    (a loop whose cancellation a library's ``wait_for`` swallowed, see the module docstring, would
    otherwise run on and a plain ``await task`` never return). Returns the exception ``task`` ended
    with, ``None`` if it was cancelled or returned. A cancellation of the caller propagates."""
    while not task.done():
        task.cancel()
        await asyncio.wait({task}, timeout=every_s)
    return None if task.cancelled() else task.exception()


async def stop_task(task: asyncio.Task[Any]) -> None:
    """Stop a background loop: :func:`cancel_until_done`, then raise what ``task`` failed with, as
    ``task.cancel()`` and an ``await task`` that ignores the cancellation would, but without waiting
    forever for a loop whose cancellation was lost."""
    failure = await cancel_until_done(task)
    if failure is not None:
        raise failure


async def within(call: Awaitable[T], timeout_s: float) -> T:
    """Await ``call`` for at most ``timeout_s``, else raise :class:`TimeoutError` once it has ended.

    Unlike ``asyncio.timeout`` around the call, the deadline is asked again every 0.1 s while the call
    runs on (:func:`cancel_until_done`): a cancellation swallowed by a ``wait_for`` inside it (a new
    connection finishing as the deadline passed) does not leave the rest of the call (the query on a
    server that then hangs) without a bound. The call runs as a task of its own; a result it returned
    in the same instant as the deadline is returned; a cancellation of the caller ends it the same way."""
    task = asyncio.ensure_future(call)
    try:
        await asyncio.wait({task}, timeout=timeout_s)
    finally:
        if not task.done():
            await cancel_until_done(task)
    if task.cancelled():
        raise TimeoutError(f"no answer within {timeout_s:g} s")
    return task.result()


async def waited_at_most(call: Awaitable[T], timeout_s: float, late: Callable[[], Exception]) -> T:
    """Await ``call`` for at most ``timeout_s``, else raise ``late()`` at once and leave ``call`` running
    (a read or write on a server that does not answer is not cut mid-statement; whatever it ends with is
    retrieved, nobody awaits it any more). A caller that is cancelled leaves it running the same way."""
    task = asyncio.ensure_future(call)
    task.add_done_callback(_retrieve)
    done, _ = await asyncio.wait({task}, timeout=timeout_s)
    if not done:
        raise late()
    return task.result()


def _retrieve(task: asyncio.Future[Any]) -> None:
    if not task.cancelled():
        task.exception()
