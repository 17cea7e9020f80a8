"""A pool that flows find without executors, made on a running node: what the empty-pool warning reports."""

from __future__ import annotations

import asyncio

import httpx
import pytest

from testkit import RunningNode

STARVED_TIMEOUT_S = 20.0  # generous: the flow fires within a tick or two of its due time


async def starve_pool(node: RunningNode, key: str, app_id: str, pool: str) -> None:
    """Register a task of ``app_id`` (its API key ``key``) routed to ``pool``, which has no executor, and
    wait until its flow found the pool empty (the node's dispatcher says so)."""
    task = {"name": f"to-{pool}", "schedule": {"kind": "delay", "delay_ms": 100}, "callback": {"pool": pool}}
    async with httpx.AsyncClient(base_url=node.base_url, headers={"authorization": f"Bearer {key}"}) as client:
        made = await client.post("/v1/tasks", json=task)
    assert made.status_code == 201, made.text
    loop = asyncio.get_running_loop()
    deadline = loop.time() + STARVED_TIMEOUT_S
    while not any(entry[:2] == (app_id, pool) for entry in node.node.pools.starved(0)):
        if loop.time() > deadline:
            pytest.fail(f"no flow found pool {pool} empty within {STARVED_TIMEOUT_S} s", pytrace=False)
        await asyncio.sleep(0.05)
