"""When pytest-timeout is about to end a test, print what every asyncio task of the main thread's loop awaits.

pytest-timeout's own dump shows the threads' stacks, and a test hung in an event loop shows nothing there but
``selector.poll``: the coroutine that waits without a deadline is a task's, not a thread's. This plugin adds,
to the same terminal, each task of the loop the main thread runs (the test's, or an async fixture's teardown)
with its await chain (coroutine by coroutine down to the future it waits on) and its ``print_stack``.

* ``signal`` method (the default here): the dump runs inside pytest-timeout's SIGALRM handler, in the main
  thread, just before the test is failed.
* ``thread`` method: pytest-timeout ends the process with ``os._exit``, so a timer thread of ours dumps
  ``LEAD_S`` seconds before it (through the loop when it still turns, else from the timer thread).
"""

from __future__ import annotations

import asyncio
import signal
import sys
import threading
import traceback
import types
from collections.abc import Callable, Generator
from typing import Any, TextIO

import pytest

LEAD_S = 3.0  # thread method: dump this long before pytest-timeout ends the process
_TIMER = pytest.StashKey[threading.Timer]()


def _main_thread_loop() -> asyncio.AbstractEventLoop | None:
    """The event loop the main thread is running, found on its stack (a running loop is thread-local)."""
    if threading.current_thread() is threading.main_thread():
        loop = asyncio._get_running_loop()
        if loop is not None:
            return loop
    frame: types.FrameType | None = sys._current_frames().get(threading.main_thread().ident or 0)
    while frame is not None:
        candidate = frame.f_locals.get("self")
        if isinstance(candidate, asyncio.AbstractEventLoop) and candidate.is_running():
            return candidate
        frame = frame.f_back
    return None


def _awaited(obj: Any) -> Any:
    """What a coroutine, generator or async generator is suspended on (None when it is not)."""
    for attr in ("cr_await", "gi_yieldfrom", "ag_await"):
        if hasattr(obj, attr):
            return getattr(obj, attr)
    return None


def _frame_of(obj: Any) -> types.FrameType | None:
    for attr in ("cr_frame", "gi_frame", "ag_frame"):
        frame = getattr(obj, attr, None)
        if frame is not None:
            return frame  # type: ignore[no-any-return]
    return None


def _describe(obj: Any) -> str:
    frame = _frame_of(obj)
    name = getattr(obj, "__qualname__", None) or type(obj).__qualname__
    if frame is not None:
        return f"{name} at {frame.f_code.co_filename}:{frame.f_lineno}"
    return f"{name}: {obj!r}"[:300]


def dump_tasks(out: TextIO | Any, loop: asyncio.AbstractEventLoop | None = None) -> None:
    """Write every task of ``loop`` (default: the main thread's running loop) with its await chain."""
    loop = loop or _main_thread_loop()
    write = out.write if hasattr(out, "write") else print
    if loop is None:
        write("asyncio: the main thread runs no event loop\n")
        return
    tasks: set[asyncio.Task[Any]] = set()
    for _attempt in range(5):  # all_tasks may race the loop when called from another thread
        try:
            tasks = asyncio.all_tasks(loop)
            break
        except RuntimeError:
            continue
    write(f"asyncio: {len(tasks)} pending task(s) of {loop!r}\n")
    for task in sorted(tasks, key=lambda t: t.get_name()):
        write(f"--- task {task.get_name()} ({_describe(task.get_coro())})\n")
        link: Any = task.get_coro()
        depth = 0
        while link is not None and depth < 50:
            write(f"    {'  ' * depth}awaits: {_describe(link)}\n")
            link = _awaited(link)
            depth += 1
        waiter = getattr(task, "_fut_waiter", None)
        if waiter is not None:
            write(f"    waits on future: {waiter!r}"[:600] + "\n")
        try:
            for line in traceback.format_list(_stack_summary(task)):
                write("    " + line.replace("\n", "\n    ").rstrip() + "\n")
        except Exception as error:  # a diagnostic must never hide the timeout itself
            write(f"    (stack unavailable: {error!r})\n")


def _stack_summary(task: asyncio.Task[Any]) -> traceback.StackSummary:
    frames = [(frame, frame.f_lineno) for frame in task.get_stack()]
    return traceback.StackSummary.extract(frames, limit=None)


def _terminal(item: pytest.Item) -> Any:
    return item.config.get_terminal_writer()


def _wrap_alarm(item: pytest.Item) -> None:
    """Run the dump in pytest-timeout's SIGALRM handler (main thread, the loop paused in its poll)."""
    handler = signal.getsignal(signal.SIGALRM)
    if not callable(handler) or getattr(handler, "_dumps_tasks", False):
        return
    original: Callable[[int, types.FrameType | None], Any] = handler

    def with_tasks(signum: int, frame: types.FrameType | None) -> Any:
        __tracebackhide__ = True
        terminal = _terminal(item)
        terminal.sep("+", title="asyncio tasks at the timeout")
        dump_tasks(terminal)
        return original(signum, frame)

    with_tasks._dumps_tasks = True  # type: ignore[attr-defined]
    signal.signal(signal.SIGALRM, with_tasks)


def _start_early_timer(item: pytest.Item, timeout: float) -> None:
    def fire() -> None:
        terminal = _terminal(item)
        loop = _main_thread_loop()
        done = threading.Event()
        header = f"asyncio tasks {LEAD_S:g} s before the timeout"
        if loop is not None and not loop.is_closed():

            def in_loop() -> None:
                terminal.sep("+", title=header)
                dump_tasks(terminal, loop)
                done.set()

            loop.call_soon_threadsafe(in_loop)
            if done.wait(1.0):
                return
            header += " (the loop does not turn: dumped from the timer thread)"
        terminal.sep("+", title=header)
        dump_tasks(terminal, loop)

    timer = threading.Timer(max(timeout - LEAD_S, timeout / 2), fire)
    timer.daemon = True
    timer.name = f"asyncio task dump {item.nodeid}"
    item.stash[_TIMER] = timer
    timer.start()


@pytest.hookimpl(wrapper=True, optionalhook=True)
def pytest_timeout_set_timer(item: pytest.Item, settings: Any) -> Generator[None, Any, Any]:
    result = yield
    if settings.timeout and settings.timeout > 0:
        handler = signal.getsignal(signal.SIGALRM)
        if getattr(handler, "__module__", None) == "pytest_timeout" or getattr(handler, "_dumps_tasks", False):
            _wrap_alarm(item)
        else:
            _start_early_timer(item, float(settings.timeout))
    return result


@pytest.hookimpl(wrapper=True, optionalhook=True)
def pytest_timeout_cancel_timer(item: pytest.Item) -> Generator[None, Any, Any]:
    timer = item.stash.get(_TIMER, None)
    if timer is not None:
        timer.cancel()
        del item.stash[_TIMER]
    return (yield)
