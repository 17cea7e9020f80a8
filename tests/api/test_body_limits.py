"""Request bodies are bounded while they are read: a large ``Content-Length`` is answered 413 before a
byte of the body is read, a chunked body stops being read at the cap, and each endpoint has its own cap.

Raw sockets, so the test controls exactly what is sent and when (an HTTP client would send it all first).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import httpx
import orjson
import pytest
import pytest_asyncio

from testkit import RunningNode, run_node
from tests.fuzz.cases import valid_task
from tjobs.settings import load_settings

pytestmark = pytest.mark.asyncio(loop_scope="session")

CAP = 64 * 1024
BATCH_CAP = 256 * 1024


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def node() -> AsyncIterator[tuple[RunningNode, str]]:
    settings = load_settings(
        None,
        storage={"urls": ["memory://"], "topology": "1x1x4"},
        allow_loopback_callbacks=True,
        api={"max_body_bytes": CAP, "max_batch_body_bytes": BATCH_CAP},
    )
    async with run_node(settings) as running:
        _, key = await running.create_app("limits")
        yield running, key


def port_of(running: RunningNode) -> int:
    return int(running.base_url.rsplit(":", 1)[1])


async def read_status(reader: asyncio.StreamReader) -> tuple[int, bytes]:
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
    status = int(head.split(b" ", 2)[1])
    lines = head.split(b"\r\n")
    length = int(next(line.split(b":", 1)[1] for line in lines if line.lower().startswith(b"content-length")))
    return status, await asyncio.wait_for(reader.readexactly(length), 5)


async def test_a_declared_length_over_the_cap_is_refused_before_the_body_is_sent(node: tuple[RunningNode, str]) -> None:
    running, key = node
    reader, writer = await asyncio.open_connection("127.0.0.1", port_of(running))
    writer.write(
        f"POST /v1/tasks HTTP/1.1\r\nhost: x\r\nauthorization: Bearer {key}\r\n"
        f"content-type: application/json\r\ncontent-length: {256 << 20}\r\n\r\n".encode()
    )
    await writer.drain()
    status, body = await read_status(reader)  # nothing of the 256 MiB was sent
    writer.close()
    error = orjson.loads(body)["error"]
    assert status == 413 and error["field"] == "body" and "api.max_body_bytes" in error["message"], body


async def test_a_chunked_body_stops_being_read_at_the_cap(node: tuple[RunningNode, str]) -> None:
    running, key = node
    reader, writer = await asyncio.open_connection("127.0.0.1", port_of(running))
    writer.write(
        f"POST /v1/tasks HTTP/1.1\r\nhost: x\r\nauthorization: Bearer {key}\r\n"
        "content-type: application/json\r\ntransfer-encoding: chunked\r\n\r\n".encode()
    )
    chunk = b" " * 16384
    sent = 0
    answer: asyncio.Task[tuple[int, bytes]] = asyncio.create_task(read_status(reader))
    try:
        while not answer.done() and sent < (64 << 20):
            writer.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
            await writer.drain()
            sent += len(chunk)
            await asyncio.sleep(0)
    except ConnectionError:
        pass
    status, body = await answer
    writer.close()
    assert status == 413 and "api.max_body_bytes" in orjson.loads(body)["error"]["message"]
    assert sent < (64 << 20), "the whole 64 MiB was sent: the body was not cut at the cap"


async def test_the_batch_endpoint_has_its_own_cap(node: tuple[RunningNode, str]) -> None:
    running, key = node
    task = {**valid_task(), "payload": "x" * 30_000}
    async with httpx.AsyncClient(base_url=running.base_url, headers={"authorization": f"Bearer {key}"}) as client:
        single = await client.post(
            "/v1/tasks", content=orjson.dumps({**task, "pad": "y" * CAP}), headers={"content-type": "application/json"}
        )
        assert single.status_code == 413 and "api.max_body_bytes" in single.json()["error"]["message"]
        five = await client.post("/v1/tasks/batch", json={"tasks": [task] * 5})  # ~150 KiB: under the batch cap
        assert five.status_code == 200 and five.json()["created"] == 5, five.text
        ten = await client.post("/v1/tasks/batch", json={"tasks": [task] * 10})  # ~300 KiB: over it
        assert ten.status_code == 413 and "api.max_batch_body_bytes" in ten.json()["error"]["message"]
