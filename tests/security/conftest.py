"""The event loops the security tests run on.

The SSRF matrix runs on asyncio everywhere; inside the loopback-only network namespace of
``scripts/ssrf_netns.sh`` (``TJOBS_TEST_SSRF_NETNS=1``) it runs on uvloop too, which is what ``tjobs serve``
runs on. uvloop connects in libuv, past the ``socket.connect`` audit hook that stops connections
elsewhere, so it only runs where nothing but ``lo`` exists and listeners count every connection.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable, Mapping

import pytest

LoopFactory = Callable[[], asyncio.AbstractEventLoop]


def loops_for_the_matrix() -> dict[str, LoopFactory]:
    loops: dict[str, LoopFactory] = {"asyncio": asyncio.new_event_loop}
    if os.environ.get("TJOBS_TEST_SSRF_NETNS"):
        import uvloop

        loops["uvloop"] = uvloop.new_event_loop
    return loops


@pytest.hookimpl(optionalhook=True)
def pytest_asyncio_loop_factories(config: pytest.Config, item: pytest.Item) -> Mapping[str, LoopFactory]:
    if item.path.name == "test_ssrf_matrix.py":
        return loops_for_the_matrix()
    return {"asyncio": asyncio.new_event_loop}
