"""Run a node and its API in one asyncio loop until SIGINT/SIGTERM, then hand off and stop cleanly."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import socket
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import uvicorn
from fastapi import FastAPI
from starlette.applications import Starlette
from starlette.types import Message, Scope

from tjobs.api import create_api
from tjobs.api.lean_creates import CreatePath
from tjobs.api.lean_heartbeat import HeartbeatPath
from tjobs.api.lean_protocol import LeanPaths, LeanProtocol
from tjobs.api.lean_reports import ReportPath
from tjobs.api.routes_ops import create_metrics_api
from tjobs.node import Node, NodeParts, settle_heap
from tjobs.settings import Settings

logger = logging.getLogger(__name__)

Mount = Callable[[FastAPI, Node], None]
"""Adds the routes of a layer above the API to a node's app before it serves: the web console,
:func:`tjobs.console.include_console`, which the command passes in (the API does not import the console)."""


class ApiServer(uvicorn.Server):
    """uvicorn without its own signal capture: the node decides how to stop (hand off, drain, close).
    Its app's routes are built before it listens (:func:`build_routes`)."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        if isinstance(self.config.app, Starlette):
            await build_routes(self.config.app)
        await super().startup(sockets)


_UNROUTED_PATH = "/.tjobs/build-routes"  # no route matches it, so its request passes every router


KEEP_ALIVE_S = 75
"""How long an idle client connection stays open: longer than the idle expiry of the clients and balancers
in front of a node (httpx 5 s, a load balancer's idle timeout typically 60 s), so that a client never
sends a request on a connection the node is closing at that instant (a reset: a POST it cannot tell from
a lost one). uvicorn's default, 5 s, raced httpx's."""


def api_server(api: FastAPI, host: str, port: int, **options: Any) -> ApiServer:
    """The API's server as ``tjobs serve`` runs it (and :func:`testkit.run_node`): executor heartbeats,
    single creates and run reports answered below ASGI (:func:`lean_protocol`), :data:`KEEP_ALIVE_S`,
    no access log, no lifespan, the running loop; ``options`` are more :class:`uvicorn.Config` arguments."""
    config = uvicorn.Config(
        api,
        host=host,
        port=port,
        http=lean_protocol(api),
        timeout_keep_alive=KEEP_ALIVE_S,
        log_level="warning",
        access_log=False,
        lifespan="off",
        loop="none",
        **options,
    )
    return ApiServer(config)


class LeanHttpProtocol(HeartbeatPath, CreatePath, ReportPath):
    """uvicorn's httptools protocol answering plain heartbeats, single creates and run reports itself
    (:mod:`tjobs.api.lean_protocol`), tried in that order."""


def lean_protocol(api: FastAPI, paths: LeanPaths | None = None) -> type[LeanProtocol]:
    """The HTTP protocol class to give uvicorn (``http=``) for ``api``; its :class:`LeanPaths` (``paths``,
    else a new one) is also ``api.state.lean_paths``."""
    lean = paths or LeanPaths(api)
    api.state.lean_paths = lean
    return type("LeanHttpProtocol", (LeanHttpProtocol,), {"lean": lean})


async def build_routes(app: Starlette) -> None:
    """Build every route of ``app`` now, by routing one request that no route matches through its router
    (not its middleware: nothing is counted or admitted). FastAPI 0.16x builds an included router's routes
    (dependencies, pydantic fields) on the first request that reaches it: on this API 100-200 ms of CPU on
    the event loop the node fires on (a first ``/readyz`` passes eight routers), which held the fires due
    then up to 0.6 s on a loaded machine (issue 31). A few ms once built."""
    scope: Scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "GET",
        "scheme": "http",
        "path": _UNROUTED_PATH,
        "raw_path": _UNROUTED_PATH.encode(),
        "root_path": "",
        "query_string": b"",
        "headers": [],
        "client": None,
        "server": None,
    }

    async def receive() -> Message:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: Message) -> None:
        pass  # the 404

    await app.router(scope, receive, send)


async def serve(
    settings: Settings,
    *,
    parts: NodeParts | None = None,
    demo: bool = False,
    after_start: Callable[[Node], Awaitable[None]] | None = None,
    mount: Mount | None = None,
    api_socket: socket.socket | None = None,
) -> None:
    """Run a node and its API until SIGINT/SIGTERM. ``api_socket``: a listening socket to serve the API on
    instead of binding ``api.host:api.port`` (a worker of ``tjobs serve --workers``, :mod:`tjobs.cli.workers`)."""
    node = Node(settings, parts)
    api = create_api(node, demo_routes=demo)
    if mount is not None:
        mount(api, node)
    server = api_server(api, settings.api.host, settings.api.port, backlog=4096, timeout_graceful_shutdown=5)
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
        serving = [asyncio.create_task(server.serve(None if api_socket is None else [api_socket]))]
        serving += [asyncio.create_task(each.serve()) for each in servers[1:]]
        while not all(each.started for each in servers):  # uvicorn offers only a flag
            failed = [task for task in serving if task.done()]
            if failed:
                _request_exit(servers)
                await asyncio.gather(*serving, return_exceptions=True)
                await failed[0]  # re-raise a bind failure
                return
            await asyncio.sleep(0.02)
        host, port = (settings.api.host, settings.api.port) if api_socket is None else api_socket.getsockname()[:2]
        logger.info("API listening on http://%s:%d", host, port, extra={"action": "api_listening"})
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
