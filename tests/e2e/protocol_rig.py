"""What the protocol end-to-end tests share: a node process, an app on it, tasks naming a target, the judging.

* :func:`protocol_node` runs ``tjobs serve`` in a child process (:mod:`testkit.node_process`;
  SQLite shards in the test's directory, a fast scheduler) with the given broker and gRPC addresses in
  ``targets.allowed_addresses``; its output is captured in ``node.log`` there.
* :class:`AppClient` is an app on that node, spoken to over the HTTP API: targets, one-shot tasks
  registered by batch, the app's flows, and every answer body kept (:attr:`AppClient.answers`) so a
  test can search them.
* :func:`judge` matches what a consumer got against what was registered: each task's one flow id
  (``<task id>-<instant>``), 0 lost, duplicates only as repeats of that flow id (counted), the tjobs
  headers present, the Standard Webhooks signature verifying with the app's secret.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
from standardwebhooks import Webhook
from standardwebhooks.webhooks import WebhookVerificationError

from testkit.consumers import Consumed
from testkit.node_process import NodeHandle, node_process

TJOBS_HEADERS = (
    "webhook-id",
    "webhook-timestamp",
    "webhook-signature",
    "tjobs-task-id",
    "tjobs-scheduled-at",
    "tjobs-attempt",
)
FAST_NODE = {
    "scheduler": {"tick_ms": 10, "cycle_s": 10, "load_lead_s": 3},
    "compensator": {"interval_s": 0.5, "grace_s": 2.0},
    "callbacks": {"backoff_base_ms": 100, "backoff_max_ms": 1000, "timeout_ms": 2000},
}
BATCH = 1000  # tasks per POST /v1/tasks/batch (its maximum)
READS_IN_FLIGHT = 32


@contextlib.contextmanager
def protocol_node(directory: Path, allowed_addresses: Sequence[str]) -> Iterator[NodeHandle]:
    """``tjobs serve`` on SQLite in ``directory`` (its log: ``directory / "node.log"``)."""
    settings = {**FAST_NODE, "targets": {"allowed_addresses": list(allowed_addresses)}}
    with node_process(topology="1x2x4", settings=settings, work_dir=directory) as node:
        yield node


@dataclass
class AppClient:
    """One app on a node, over the HTTP API (see the module docstring)."""

    http: httpx.AsyncClient
    secret: str
    answers: list[str] = field(default_factory=list)
    reads_resent: int = 0

    @classmethod
    @contextlib.asynccontextmanager
    async def create(cls, node: NodeHandle, name: str = "e2e") -> Any:
        admin = {"authorization": f"Bearer {node.admin_key}"}
        async with httpx.AsyncClient(base_url=node.base_url, headers=admin, timeout=60) as admin_client:
            body = {
                "name": name,
                "rate_limit_per_s": 100_000,
                "max_concurrency": 100,
                "allowed_callback_hosts": ["127.0.0.1"],
                "api_rate_limit_per_s": 1_000_000,
                "create_rate_limit_per_s": 1_000_000,
            }
            created = await admin_client.post("/v1/apps", json=body)
            assert created.status_code == 201, created.text
        app = created.json()
        headers = {"authorization": f"Bearer {app['api_key']}"}
        limits = httpx.Limits(max_connections=READS_IN_FLIGHT)
        async with httpx.AsyncClient(base_url=node.base_url, headers=headers, timeout=60, limits=limits) as http:
            yield cls(http, app["secrets"][0])

    async def call(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        """An API call whose answer body is kept in :attr:`answers`. A read whose connection broke is
        sent again (at most twice; counted in :attr:`reads_resent`): thousands of reads on a loaded
        machine now and then meet a kept-alive connection the node is closing just then."""
        for resent in range(3 if method == "GET" else 1):
            try:
                response = await self.http.request(method, path, **kwargs)
            except httpx.TransportError:
                if method != "GET" or resent == 2:
                    raise
                self.reads_resent += 1
                await asyncio.sleep(0.1)
                continue
            self.answers.append(response.text)
            return response
        raise AssertionError("unreachable")

    async def create_target(self, target: Mapping[str, Any]) -> dict[str, Any]:
        response = await self.call("POST", "/v1/targets", json=dict(target))
        assert response.status_code == 201, response.text
        created: dict[str, Any] = response.json()
        return created

    async def register(self, target: str, count: int, start_ms: int, window_ms: int) -> dict[str, int]:
        """``count`` one-shot tasks naming ``target``, due evenly over ``[start_ms, start_ms + window_ms)``;
        returns task id → its instant (epoch ms)."""
        instants = [start_ms + index * window_ms // count for index in range(count)]
        registered: dict[str, int] = {}
        for first in range(0, count, BATCH):
            tasks = [
                {
                    "name": f"e2e-{index}",
                    "schedule": {"kind": "at", "at_ms": instants[index]},
                    "callback": {"target": target},
                    "payload": {"i": index},
                }
                for index in range(first, min(first + BATCH, count))
            ]
            response = await self.call("POST", "/v1/tasks/batch", json={"tasks": tasks})
            assert response.status_code == 200, response.text
            answer = response.json()
            assert answer["created"] == len(tasks), answer
            for item in answer["items"]:
                registered[item["id"]] = instants[first + item["index"]]
        return registered

    async def app_flows(self) -> dict[str, list[dict[str, Any]]]:
        """Every flow of the app (a new app per test: only the test's), task id -> its flows, read with the
        flow search (``GET /v1/flows``) a page of 1,000 at a time: one or two reads for a run of 1,000
        fires, where reading each task's flows took a thousand (half the test's CPU, node and client)."""
        found: dict[str, list[dict[str, Any]]] = {}
        cursor: str | None = None
        while True:
            params: dict[str, Any] = {"limit": 1000, **({"cursor": cursor} if cursor else {})}
            response = await self.call("GET", "/v1/flows", params=params)
            assert response.status_code == 200, response.text
            page = response.json()
            for flow in page["items"]:
                found.setdefault(str(flow["task_id"]), []).append(flow)
            cursor = page["next_cursor"]
            if not cursor:
                return found

    async def await_settled(self, task_ids: Iterable[str], timeout_s: float) -> dict[str, dict[str, Any]]:
        """Wait until every task's one flow is settled (neither pending nor sending); returns task id ->
        that flow. A task with a second flow, or a flow of a task not asked about, fails at once."""
        waiting = set(task_ids)
        deadline = time.monotonic() + timeout_s
        while True:
            flows = await self.app_flows()
            unknown = set(flows) - waiting
            assert not unknown, f"flows of tasks not registered here: {sorted(unknown)[:5]}"
            repeated = {task_id: len(items) for task_id, items in flows.items() if len(items) > 1}
            assert not repeated, f"tasks with more than one flow: {dict(list(repeated.items())[:5])}"
            settled = {
                task_id: items[0]
                for task_id, items in flows.items()
                if items[0]["status"] not in ("pending", "sending")
            }
            if len(settled) == len(waiting):
                return settled
            assert time.monotonic() < deadline, (
                f"{len(waiting) - len(settled)} tasks' flows not settled in {timeout_s} s"
            )
            await asyncio.sleep(0.5)


async def wait_for_flows(inbox: Callable[[], Sequence[Consumed]], count: int, timeout_s: float) -> None:
    """Wait until ``inbox()`` holds messages of ``count`` distinct flow ids (or the timeout)."""
    deadline = time.monotonic() + timeout_s
    while len({message.message_id for message in inbox()}) < count and time.monotonic() < deadline:  # noqa: ASYNC110
        await asyncio.sleep(0.1)


@dataclass
class Tally:
    """How the messages a consumer got match the tasks registered."""

    messages: int
    flows: int  # distinct flow ids among them
    lost: int  # registered tasks of which no message arrived
    duplicates: int  # messages repeating a flow id already received
    flows_duplicated: int
    retried_messages: int | None  # messages with tjobs-attempt > 1 (None: attempts not known)
    problems: list[str]  # anything else wrong, one line each (at most 20)


def judge(registered: Mapping[str, int], messages: Sequence[Consumed], secret: str) -> Tally:
    """Match ``messages`` against ``registered`` (task id → instant), checking every message."""
    webhook = Webhook(secret)
    problems: list[str] = []
    flow_ids: list[str] = []
    attempts: list[int] = []
    for message in messages:
        missing = [name for name in TJOBS_HEADERS if not message.headers.get(name)]
        if missing:
            problems.append(f"{message.message_id}: headers missing: {missing}")
            continue
        flow_id = message.headers["webhook-id"]
        task_id = message.headers["tjobs-task-id"]
        if message.message_id != flow_id:
            problems.append(f"{flow_id}: carried as message id {message.message_id!r}")
        if message.headers["tjobs-scheduled-at"] != str(registered.get(task_id)):
            problems.append(f"{flow_id}: tjobs-scheduled-at {message.headers['tjobs-scheduled-at']}")
        try:
            webhook.verify(message.body, message.headers, json_parse=False)
        except WebhookVerificationError as error:
            problems.append(f"{flow_id}: signature does not verify ({error})")
        flow_ids.append(flow_id)
        attempts.append(int(message.headers["tjobs-attempt"]))
    return tally(registered, flow_ids, attempts, problems)


def tally(
    registered: Mapping[str, int], flow_ids: Sequence[str], attempts: Sequence[int] | None, problems: list[str]
) -> Tally:
    """Count ``flow_ids`` (one per message, with its ``attempts`` when known) against ``registered``:
    every flow id must be a registered task's one flow ``<task id>-<instant>``, each attempt of a flow
    received at most once."""
    expected = {f"{task_id}-{instant}" for task_id, instant in registered.items()}
    per_flow: Counter[str] = Counter(flow_ids)
    problems = list(problems)
    problems += [f"{flow_id}: not the flow of a registered task" for flow_id in sorted(set(per_flow) - expected)]
    if attempts is not None:
        repeated = Counter(zip(flow_ids, attempts, strict=True))
        problems += [
            f"{flow}: attempt {attempt} received {n} times" for (flow, attempt), n in repeated.items() if n > 1
        ]
    return Tally(
        messages=len(flow_ids),
        flows=len(per_flow),
        lost=len(expected - set(per_flow)),
        duplicates=sum(count - 1 for count in per_flow.values()),
        flows_duplicated=sum(1 for count in per_flow.values() if count > 1),
        retried_messages=None if attempts is None else sum(1 for attempt in attempts if attempt > 1),
        problems=problems[:20],
    )


def flow_statuses(settled: Mapping[str, Mapping[str, Any]]) -> Counter[str]:
    return Counter(str(flow["status"]) for flow in settled.values())


def attempts_histogram(settled: Mapping[str, Mapping[str, Any]]) -> dict[int, int]:
    return dict(sorted(Counter(int(flow["attempts"]) for flow in settled.values()).items()))
