"""Run a node and its API in one asyncio loop until SIGINT/SIGTERM, then hand off and stop cleanly."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
from collections.abc import Awaitable, Callable, Iterator

import uvicorn
from fastapi import FastAPI

from tjobs.api import create_api
from tjobs.api.lean_heartbeat import heartbeat_protocol
from tjobs.api.routes_ops import create_metrics_api
from tjobs.node import Node, NodeParts, settle_heap
from tjobs.settings import Settings

logger = logging.getLogger(__name__)

Mount = Callable[[FastAPI, Node], None]
"""Adds the routes of a layer above the API to a node's app before it serves: the web console,
:func:`tjobs.console.include_console`, which the command passes in (the API does not import the console)."""


class ApiServer(uvicorn.Server):
    """uvicorn without its own signal capture: the node decides how to stop (hand off, drain, close)."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


async def serve(
    settings: Settings,
    *,
    parts: NodeParts | None = None,
    demo: bool = False,
    after_start: Callable[[Node], Awaitable[None]] | None = None,
    mount: Mount | None = None,
) -> None:
    node = Node(settings, parts)
    api = create_api(node, demo_routes=demo)
    if mount is not None:
        mount(api, node)
    config = uvicorn.Config(
        api,
        host=settings.api.host,
        port=settings.api.port,
        http=heartbeat_protocol(api),  # executor heartbeats answered below ASGI (tjobs.api.lean_heartbeat)
        log_level="warning",
        access_log=False,
        lifespan="off",
        loop="none",
        backlog=4096,
        timeout_graceful_shutdown=5,
    )
    server = ApiServer(config)
    servers = [server]
    metrics_address = settings.metrics.listen_address()
    if metrics_address is not None:
        servers.append(
            ApiServer(
                uvicorn.Config(
                    create_metrics_api(node, api.state.rate_limits),
                    host=metrics_address[0],
                    port=metrics_address[1],
                    log_level="warning",
                    access_log=False,
                    lifespan="off",
                    loop="none",
                    timeout_graceful_shutdown=1,
                )
            )
        )
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, _request_exit, servers)
    await node.start()
    settle_heap()
    try:
        serving = [asyncio.create_task(each.serve()) for each in servers]
        while not all(each.started for each in servers):  # uvicorn offers only a flag
            failed = [task for task in serving if task.done()]
            if failed:
                _request_exit(servers)
                await asyncio.gather(*serving, return_exceptions=True)
                await failed[0]  # re-raise a bind failure
                return
            await asyncio.sleep(0.02)
        logger.info(
            "API listening on http://%s:%d", settings.api.host, settings.api.port, extra={"action": "api_listening"}
        )
        if metrics_address is not None:
            logger.info(
                "metrics listening on http://%s/metrics", settings.metrics.listen, extra={"action": "metrics_listening"}
            )
        if after_start is not None:
            await after_start(node)
        await serving[0]
        for other in servers[1:]:
            other.should_exit = True
        await asyncio.gather(*serving[1:])
    finally:
        await node.stop()


def _request_exit(servers: list[ApiServer]) -> None:
    logger.info("stop requested; handing off and draining", extra={"action": "node_stopping"})
    for server in servers:
        server.should_exit = True


def run(coro: Awaitable[None]) -> None:
    """Run on uvloop when it is installed (it roughly halves per-request overhead), else asyncio."""
    try:
        import uvloop
    except ImportError:
        asyncio.run(coro)  # type: ignore[arg-type]
        return
    uvloop.run(coro)  # type: ignore[arg-type]
