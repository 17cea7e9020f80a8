"""Helpers to run a real node inside a test's event loop (API on a loopback port, scheduler running).

To test callbacks without a receiver, hand the node the transport twin::

    transport = RecordingTransport()
    transport.script(Answer(503, retry_after="1"), then=Answer(204))
    async with run_node(settings, NodeParts(transport=transport)) as running:
        ...
        await transport.wait_for(2)
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

from fastapi import FastAPI

from testkit.ports import free_port
from tjobs.api import create_api
from tjobs.api.app import create_app_record
from tjobs.api.server import api_server
from tjobs.console import include_console
from tjobs.delivery.recording import Answer, RecordingTransport
from tjobs.model import App
from tjobs.node import Node, NodeParts
from tjobs.settings import Settings

__all__ = ["Answer", "NodeParts", "RecordingTransport", "RunningNode", "free_port", "run_node"]


@dataclass
class RunningNode:
    node: Node
    base_url: str
    api: FastAPI

    async def create_app(self, name: str = "test", **body: Any) -> tuple[App, str]:
        """Create an app directly (no admin HTTP round trip); returns it with its API key."""
        return await create_app_record(self.node, {"name": name, **body})


@contextlib.asynccontextmanager
async def run_node(
    settings: Settings, parts: NodeParts | None = None, port: int | None = None
) -> AsyncIterator[RunningNode]:
    """Run a node on ``port`` (a free loopback port by default) until the block ends."""
    port = port or free_port()
    settings = settings.model_copy(update={"api": settings.api.model_copy(update={"port": port})})
    node = Node(settings, parts)
    api = create_api(node)
    include_console(api, node)  # as tjobs serve mounts it
    server = api_server(api, "127.0.0.1", port)  # as tjobs serve runs it
    await node.start()
    serving = asyncio.create_task(server.serve())
    try:
        while not server.started:
            if serving.done():
                await serving
                raise RuntimeError("API server did not start")
            await asyncio.sleep(0.01)
        yield RunningNode(node, f"http://127.0.0.1:{port}", api)
    finally:
        server.should_exit = True
        await asyncio.gather(serving, return_exceptions=True)
        await node.stop(drain_timeout_s=2.0)
