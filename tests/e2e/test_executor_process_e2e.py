"""Timeouts and cancellation of job runs with the Python executor helper (tjobs.executor) in a process of
its own and a real node process (issue 30): the helper's run handler never finishes on its own
(tests/e2e/executor_process.py), so it stops only when the helper tells it to.

A run whose timeout passes ends ``timed_out``; the helper learns it at its next heartbeat (``409``) and
tells the handler to stop; the task's policy sends the next attempt, then dead-letters the flow. A run
cancelled through the API, or with ``tjobs flows cancel``, is told at the next heartbeat's answer; its
handler stops and the run ends ``cancelled``, once: one send, one final report, no retry.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

import httpx
import pytest

from testkit.children import checkout_env
from testkit.node_process import NodeHandle, node_process
from tests.e2e.executor_process import ExecutorProcess, executor_process
from tests.e2e.test_job_runs_e2e import NODE_SETTINGS, _app_client, _flow_until

HEARTBEAT_S = 0.2  # the helper's run heartbeats: a stop is told within one of these
STORAGES = pytest.mark.parametrize(
    "storage", ["sqlite", pytest.param("mariadb", marks=pytest.mark.mariadb)], indirect=True
)  # tests/e2e/conftest.py's storage (its in-memory twin has no meaning for a node of its own)


def _node(storage: dict[str, Any], tmp_path: Path) -> AbstractContextManager[NodeHandle]:
    settings: dict[str, Any] = dict(NODE_SETTINGS)
    if "database_prefix" in storage:
        settings["storage"] = {"database_prefix": storage["database_prefix"]}
    return node_process(
        storage_urls=storage["urls"], topology=storage["topology"], settings=settings, work_dir=tmp_path / "node"
    )


async def _executor_of(
    node: NodeHandle, client: httpx.AsyncClient, tmp_path: Path, pool: str
) -> AbstractContextManager[ExecutorProcess]:
    secrets = (await client.get("/v1/app")).json()["secrets"]
    api_key = client.headers["authorization"].removeprefix("Bearer ")
    return executor_process(
        tmp_path / "executor",
        tjobs_url=node.base_url,
        api_key=api_key,
        secrets=secrets,
        pool=pool,
        heartbeat_s=HEARTBEAT_S,
    )


def _of(events: list[dict[str, Any]], flow_id: str) -> list[tuple[str, int]]:
    return [(e["event"], e["attempt"]) for e in events if e.get("flow_id") == flow_id and e["event"] != "report"]


@pytest.mark.timing  # each stop is bounded by the timeout, the compensator's pass and a heartbeat
@STORAGES
async def test_a_run_past_its_timeout_is_stopped_at_its_next_heartbeat_and_retried_until_dead(
    storage: dict[str, Any], tmp_path: Path
) -> None:
    with _node(storage, tmp_path) as node:
        async with await _app_client(node.base_url, node.admin_key) as client:
            with await _executor_of(node, client, tmp_path, "slow") as executor:
                task = {
                    "name": "slow",
                    "schedule": {"kind": "delay", "delay_ms": 0},
                    "callback": {"pool": {"name": "slow"}, "run_timeout_ms": 1000, "max_attempts": 2},
                }
                created = await client.post("/v1/tasks", json=task)
                assert created.status_code == 201, created.text
                [first] = await executor.wait_for("started")
                flow_id = first["flow_id"]
                stops = await executor.wait_for("told_to_stop", 2)
                dead = await _flow_until(client, flow_id, "dead", timeout_s=15)
                await asyncio.sleep(0.5)  # two compensator passes: nothing more is sent
                events = executor.events()
                late = await client.post(f"/v1/flows/{flow_id}/report", json={"status": "succeeded", "attempt": 2})

    starts = [e for e in events if e["event"] == "started"]
    # attempt 2 may start before attempt 1's handler hears of its end: the retry goes at once, the heartbeat
    # that tells attempt 1 is up to HEARTBEAT_S later
    assert sorted(_of(events, flow_id)) == [("started", 1), ("started", 2), ("told_to_stop", 1), ("told_to_stop", 2)]
    assert [e["attempt"] for e in starts] == [1, 2] and [e["attempt"] for e in stops] == [1, 2], events
    for start, stop in zip(starts, stops, strict=True):
        # the deadline (1 s), the compensator's pass (0.2 s + 0.5 s grace), a heartbeat, and slack
        assert 1.0 <= stop["at"] - start["at"] <= 1.0 + 0.7 + HEARTBEAT_S + 1.5, (start, stop)
    reports = [(e["attempt"], e["status"], e["answer"]) for e in events if e["event"] == "report"]
    for attempt in (1, 2):
        mine = [(status, answer) for a, status, answer in reports if a == attempt]
        assert ("running", 409) in mine, reports  # the heartbeat that told the helper the run was over
        assert mine[-1] == ("failed", 409), reports  # its final report: too late, the run had timed out
        assert ("running", 200) in mine, reports  # heartbeats before the deadline were taken
    assert dead["run"]["status"] == "timed_out" and dead["run"]["attempt"] == 2
    assert "run timed out" in dead["last_error"]
    assert [a["status_code"] for a in dead["attempt_history"]] == [202, 202]
    assert late.status_code == 409 and late.json()["error"]["code"] == "run_finished"


async def _cancel_with_the_cli(base_url: str, api_key: str, flow_id: str) -> dict[str, Any]:
    env = {**checkout_env(), "TJOBS_URL": base_url, "TJOBS_API_KEY": api_key}
    cli = [sys.executable, "-m", "tjobs.cli.main", "flows", "cancel", flow_id, "--json"]
    done = await asyncio.to_thread(subprocess.run, cli, env=env, capture_output=True, timeout=30)
    assert done.returncode == 0, done.stderr.decode()[-2000:]
    answer: dict[str, Any] = json.loads(done.stdout)
    return answer


@pytest.mark.timing  # the stop is bounded by one heartbeat after the cancel
@pytest.mark.parametrize("via", ["api", "cli"])
@STORAGES
async def test_a_run_cancelled_while_its_handler_runs_ends_cancelled_once(
    storage: dict[str, Any], tmp_path: Path, via: str
) -> None:
    with _node(storage, tmp_path) as node:
        async with await _app_client(node.base_url, node.admin_key) as client:
            with await _executor_of(node, client, tmp_path, "long") as executor:
                task = {
                    "name": "long",
                    "schedule": {"kind": "delay", "delay_ms": 0},
                    "callback": {"pool": {"name": "long"}, "run_timeout_ms": 60_000, "max_attempts": 3},
                }
                created = await client.post("/v1/tasks", json=task)
                assert created.status_code == 201, created.text
                [started] = await executor.wait_for("started")
                flow_id = started["flow_id"]
                await _flow_until(client, flow_id, "running")
                await asyncio.sleep(2 * HEARTBEAT_S)  # a heartbeat or two before the cancel
                asked_at = time.time()
                if via == "api":
                    asked = (await client.post(f"/v1/flows/{flow_id}/cancel")).json()
                else:
                    api_key = client.headers["authorization"].removeprefix("Bearer ")
                    asked = await _cancel_with_the_cli(node.base_url, api_key, flow_id)
                [stopped] = await executor.wait_for("told_to_stop")
                ended = await _flow_until(client, flow_id, "cancelled")
                await asyncio.sleep(1.0)  # five compensator passes: no retry, no second end
                again = await client.post(f"/v1/flows/{flow_id}/cancel")
                final = (await client.get(f"/v1/flows/{flow_id}")).json()
                events = executor.events()

    assert asked["status"] == "cancelling" and asked["run"]["cancel_requested"] is True, asked
    slack_s = 3.0 if via == "cli" else 1.0  # the CLI's process starts after asked_at
    assert stopped["at"] - asked_at <= HEARTBEAT_S + slack_s, (asked_at, stopped)
    assert _of(events, flow_id) == [("started", 1), ("told_to_stop", 1)]
    reports = [(e["status"], e["answer"]) for e in events if e["event"] == "report"]
    assert ("running", 200) in reports and [r for r in reports if r[0] != "running"] == [("failed", 200)], reports
    assert ended["run"]["status"] == "cancelled" and ended["run"]["cancel_requested"] is True
    assert final["status"] == "cancelled" and final["run"]["status"] == "cancelled" and final["attempts"] == 1
    assert [a["status_code"] for a in final["attempt_history"]] == [202]
    assert again.status_code == 409, again.text
