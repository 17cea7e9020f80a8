"""A cancellation asked while a call runs is raised, even where ``asyncio.wait_for`` loses it (gh-86296).

The technique of every case: the caller is cancelled in the same loop turn as the awaited inner
future gets its result, before either wakes up. Python 3.11's ``wait_for`` then returns the result,
and the cancellation is gone unless :func:`tjobs.cancellation.cancellable` raises it.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
from collections.abc import Callable, Coroutine
from typing import Any

import pytest

from tjobs.cancellation import cancel_until_done, cancellable, within


async def cancelled_as_it_finishes(
    call: Callable[[asyncio.Future[str]], Coroutine[Any, Any, object]], outcome: str | BaseException = "done"
) -> asyncio.Task[object]:
    """Run ``call(inner)`` in a task; settle ``inner`` with ``outcome`` and cancel the task in the same
    loop turn; return the finished task."""
    inner: asyncio.Future[str] = asyncio.get_running_loop().create_future()
    task = asyncio.create_task(call(inner))
    await asyncio.sleep(0)  # the task now waits on inner, through wait_for
    if isinstance(outcome, BaseException):
        inner.set_exception(outcome)
    else:
        inner.set_result(outcome)
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError, Exception):
        await task
    return task


async def through_wait_for(inner: asyncio.Future[str]) -> str:
    return await asyncio.wait_for(inner, 5)


@pytest.mark.skipif(sys.version_info >= (3, 12), reason="gh-86296 is fixed from Python 3.12 on")
async def test_python_3_11_wait_for_loses_a_cancellation_that_comes_as_its_call_finishes() -> None:
    task = await cancelled_as_it_finishes(through_wait_for)
    assert not task.cancelled() and task.result() == "done"  # the bug these cases guard against


async def test_a_cancellation_swallowed_into_a_result_is_raised() -> None:
    task = await cancelled_as_it_finishes(lambda inner: cancellable(through_wait_for(inner)))
    assert task.cancelled()


async def test_a_cancellation_swallowed_into_another_error_is_raised() -> None:
    task = await cancelled_as_it_finishes(
        lambda inner: cancellable(through_wait_for(inner)), ConnectionResetError("gone")
    )
    assert task.cancelled()


async def test_inside_a_timeout_block_a_swallowed_expiry_is_the_blocks_timeout() -> None:
    # the deadline's own cancellation, lost by wait_for as the call finished: the block still times out
    loop = asyncio.get_running_loop()
    inner: asyncio.Future[str] = loop.create_future()

    async def bounded() -> str:
        async with asyncio.timeout(0.01) as deadline:
            expires_at = deadline.when()
            assert expires_at is not None
            loop.call_at(expires_at, inner.set_result, "done")  # in the same loop turn as the expiry
            return await cancellable(through_wait_for(inner))

    with pytest.raises(TimeoutError):
        await bounded()


async def test_a_call_that_returns_or_fails_without_a_cancellation_is_untouched() -> None:
    loop = asyncio.get_running_loop()
    answered: asyncio.Future[str] = loop.create_future()
    answered.set_result("answer")
    assert await cancellable(answered) == "answer"
    refused: asyncio.Future[str] = loop.create_future()
    refused.set_exception(ConnectionRefusedError("refused"))
    with pytest.raises(ConnectionRefusedError):
        await cancellable(refused)


async def test_a_plain_cancellation_propagates() -> None:
    waiting = asyncio.create_task(cancellable(asyncio.sleep(10)))
    await asyncio.sleep(0)
    waiting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiting


async def test_a_cancellation_asked_before_the_call_is_not_raised_again() -> None:
    # a task cleaning up after its own cancellation may still await calls that complete
    async def cleans_up() -> str:
        try:
            await asyncio.sleep(10)
        except asyncio.CancelledError:
            return await cancellable(asyncio.sleep(0, "cleaned"))
        return "not cancelled"

    task = asyncio.create_task(cleans_up())
    await asyncio.sleep(0)
    task.cancel()
    assert await task == "cleaned"


async def test_a_cancellation_the_call_handled_itself_does_not_count() -> None:
    async def times_out_inside() -> str:
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(0):
                await asyncio.sleep(10)
        return "went on"

    assert await cancellable(times_out_inside()) == "went on"


# ---- cancel_until_done: a background loop whose cancellation a wait_for swallowed --------------------


async def test_cancel_until_done_ends_a_loop_that_lost_its_first_cancellation() -> None:
    lost = 0

    async def loop() -> None:
        nonlocal lost
        while True:
            try:
                await asyncio.sleep(0.01)
            except asyncio.CancelledError:
                if lost:
                    raise
                lost += 1  # swallowed, as wait_for does when it comes as the inner call finishes

    task = asyncio.create_task(loop())
    await asyncio.sleep(0)
    async with asyncio.timeout(5):
        failure = await cancel_until_done(task)
    assert (lost, task.cancelled(), failure) == (1, True, None)


async def test_cancel_until_done_returns_what_the_task_failed_with() -> None:
    async def fails() -> None:
        raise RuntimeError("broken")

    task = asyncio.create_task(fails())
    await asyncio.sleep(0)
    failure = await cancel_until_done(task)
    assert isinstance(failure, RuntimeError)


# ---- within: a deadline asked again while the call runs on ----------------------------------------------


async def test_within_ends_a_call_that_swallowed_its_deadline() -> None:
    ended: list[str] = []

    async def swallows_once() -> str:
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.sleep(10)  # as wait_for does when its call finishes as the deadline comes
        try:
            await asyncio.sleep(10)
        finally:
            ended.append("ended")
        return "answered"

    async with asyncio.timeout(5):
        with pytest.raises(TimeoutError):
            await within(swallows_once(), 0.01)
    assert ended == ["ended"]


async def test_within_returns_the_answer_and_raises_the_failure_of_the_call() -> None:
    assert await within(asyncio.sleep(0, "answer"), 1) == "answer"

    async def refused() -> None:
        raise ConnectionRefusedError("refused")

    with pytest.raises(ConnectionRefusedError):
        await within(refused(), 1)


async def test_a_cancellation_of_the_caller_of_within_ends_the_call_and_propagates() -> None:
    started = asyncio.Event()
    ended = asyncio.Event()

    async def long_call() -> None:
        started.set()
        try:
            await asyncio.sleep(10)
        finally:
            ended.set()

    caller = asyncio.create_task(within(long_call(), 10))
    await started.wait()
    caller.cancel()
    with pytest.raises(asyncio.CancelledError):
        await caller
    assert ended.is_set()
