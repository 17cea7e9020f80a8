"""One fault scenario end to end: 3 node processes, the workload, one fault in the middle of the window,
then the accounting (:mod:`tests.chaos.accounting`) and a one-line summary of the figures.

Timeline (``Profile``): interval tasks fire every ``every_ms`` from ``start`` for ``window_s``; one-shot
tasks are registered throughout; at ``start + 3.5 s`` some tasks are paused and as many deleted; at
``start + fault_at_s`` the fault runs (it returns the :class:`FaultWindow` it caused). Every instant must
then be delivered by ``max(last instant, fault end) + settle_s``.
"""

from __future__ import annotations

import asyncio
import json
import math
import os
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from sharding import shard_of_task_id
from testkit.cluster_rig import Api, ClusterRig, now_ms
from tests.chaos.accounting import (
    Callback,
    Figures,
    Promise,
    StoredFlow,
    account,
    percentile,
    select,
    stale_sends,
)
from tests.chaos.receiver import ChaosReceiver
from tests.chaos.workload import ChaosClient, promises, read_flows, register_intervals, stream_one_shots
from tjobs.settings import CallbackSettings, ClusterSettings, CompensatorSettings, SchedulerSettings

NODES = 3
QUIET_AFTER_S = 2.0  # after everything arrived: time for a late duplicate or phantom to show up
OUTCOMES: list[Outcome] = []  # every run of the session; conftest prints their figure lines at its end


def product_defaults() -> dict[str, Any]:
    """The product's own defaults for what the rig speeds up (cycle 300 s, compensator grace 30 s, ...)."""
    scheduler, compensator = SchedulerSettings(), CompensatorSettings()
    callbacks, cluster = CallbackSettings(), ClusterSettings()
    return {
        "scheduler": {"cycle_s": scheduler.cycle_s, "load_lead_s": scheduler.load_lead_s, "tick_ms": scheduler.tick_ms},
        "compensator": {"interval_s": compensator.interval_s, "grace_s": compensator.grace_s},
        "callbacks": {
            "backoff_base_ms": callbacks.backoff_base_ms,
            "backoff_max_ms": callbacks.backoff_max_ms,
            "timeout_ms": callbacks.timeout_ms,
        },
        "cluster": {
            "lease_ttl_s": cluster.lease_ttl_s,
            "sync_interval_ms": cluster.sync_interval_ms,
            "hot_poll_interval_ms": cluster.hot_poll_interval_ms,
        },
    }


def outcome_flush() -> str:
    """The nodes' outcome flush setting, ``<ms>ms/<batch>``: the product default unless the suite runs with
    ``TJOBS_CALLBACKS__OUTCOME_FLUSH_MS`` / ``_BATCH`` set (``make chaos-grouped``), which every node inherits."""
    defaults = CallbackSettings()
    flush_ms = os.environ.get("TJOBS_CALLBACKS__OUTCOME_FLUSH_MS", str(defaults.outcome_flush_ms))
    batch = os.environ.get("TJOBS_CALLBACKS__OUTCOME_FLUSH_BATCH", str(defaults.outcome_flush_batch))
    return f"{flush_ms}ms/{batch}"


@dataclass(frozen=True)
class Profile:
    name: str
    interval_tasks: int = 60
    every_ms: int = 1000
    window_s: float = 24.0
    fault_at_s: float = 6.0
    one_shots_per_s: float = 4.0
    stops: int = 3  # interval tasks paused, and as many deleted, before the fault
    settle_s: float = 20.0
    product_defaults: bool = False  # else the rig's fast settings (10 s cycles, 3 s compensator grace)

    def overrides(self) -> dict[str, Any]:
        return product_defaults() if self.product_defaults else {}

    def with_defaults(self) -> Profile:
        return Profile(**{**self.__dict__, "name": f"{self.name}+defaults", "product_defaults": True})


QUICK = Profile("quick")
LONG = Profile("long", interval_tasks=120, window_s=90.0, fault_at_s=20.0, one_shots_per_s=8.0, stops=6, settle_s=40.0)


@dataclass(frozen=True)
class FaultWindow:
    """What a fault did and when (epoch ms): the victim node (index), server (storage URL index) and the
    jobs (shards) the victim node held when it was hit."""

    what: str
    start_ms: int
    end_ms: int
    victim_node: int | None = None
    victim_server: int | None = None
    victim_jobs: frozenset[int] = frozenset()
    victim_owns_again_ms: int | None = None  # a resumed victim: when it first held jobs again


@dataclass
class Stage:
    """What a fault may act on."""

    rig: ClusterRig
    api: Api
    client: ChaosClient
    receiver: ChaosReceiver
    profile: Profile
    window_end_ms: int


Fault = Callable[[Stage], Awaitable[FaultWindow]]


@dataclass
class Outcome:
    profile: Profile
    window: FaultWindow
    figures: Figures
    promises: dict[int, Promise]
    callbacks: list[Callback]
    flows: list[StoredFlow]
    deadline_ms: int
    load: tuple[float, float, float] = field(default_factory=os.getloadavg)  # when the run ended
    notes: dict[str, object] = field(default_factory=dict)

    def counts(self) -> dict[str, int]:
        """The counts every scenario must bring to 0."""
        f = self.figures
        return {
            "lost": len(f.lost),
            "duplicate_flows": len(f.duplicate_flows),
            "phantom": len(f.phantom),
            "unreadable": len(f.unreadable),
            "attempt_reuse": len(f.attempt_reuse),
        }

    def victim_tasks(self) -> set[int]:
        return {t for t in self.promises if shard_of_task_id(t) in self.window.victim_jobs}

    def healthy_first_send_late_ms(self) -> list[int]:
        """Lateness of first sends of instants due during the fault, of tasks on the other servers."""
        assert self.window.victim_server is not None
        servers = {p.server for p in self.promises.values()} - {self.window.victim_server}
        return select(
            self.figures.first_send_late_ms,
            self.promises,
            servers=servers,
            due_from_ms=self.window.start_ms,
            due_until_ms=self.window.end_ms,
        )

    def late_healthy_instants(self, limit_ms: int, most: int = 40) -> str:
        """For a failure message: the first ``most`` first sends of healthy-server instants due in the fault
        later than ``limit_ms`` (task, shard, its due instant and create ack relative to the fault's start,
        lateness), so a rare failure says which fires were held and when."""
        assert self.window.victim_server is not None
        start = self.window.start_ms
        lines = []
        for (task_id, instant), late in sorted(self.figures.first_send_late_ms.items(), key=lambda item: item[0][1]):
            promise = self.promises[task_id]
            if (
                promise.server == self.window.victim_server
                or not start <= instant <= self.window.end_ms
                or instant < promise.create_acked_ms
                or late <= limit_ms
            ):
                continue
            lines.append(
                f"task {task_id} shard {shard_of_task_id(task_id)} server {promise.server}: due at fault+"
                f"{instant - start} ms, create acked at fault{promise.create_acked_ms - start:+d} ms, "
                f"{'interval' if len(promise.may) > 1 else 'one-shot'}, first send {late} ms late"
            )
        more = f"\n... and {len(lines) - most} more" if len(lines) > most else ""
        return "\n".join(lines[:most]) + more

    def healthy_create_ms(self) -> list[int]:
        """How long the acknowledged creates sent during the fault, of tasks on the other servers, took."""
        assert self.window.victim_server is not None
        return [
            p.create_acked_ms - p.create_sent_ms
            for p in self.promises.values()
            if p.server != self.window.victim_server and self.window.start_ms <= p.create_sent_ms <= self.window.end_ms
        ]

    def victim_delivered_late_ms(self) -> list[int]:
        """Lateness of deliveries of instants due during the fault, of tasks in the victim node's jobs."""
        return select(
            self.figures.delivered_late_ms,
            self.promises,
            tasks=self.victim_tasks(),
            due_from_ms=self.window.start_ms,
            due_until_ms=self.window.end_ms,
        )

    def stale_sends(self) -> list[Callback]:
        assert self.window.victim_node is not None
        return stale_sends(
            self.callbacks,
            self.flows,
            sender=f"tjobs-rig/node{self.window.victim_node}",
            stopped_ms=self.window.start_ms,
            resumed_ms=self.window.end_ms,
            owns_again_ms=self.window.victim_owns_again_ms,
        )

    def dump(self, directory: str) -> Path:
        """Write the run's raw record (window, promises, callbacks, flows) as JSON, for diagnosis."""
        path = Path(directory) / f"chaos-{self.window.start_ms}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(
            json.dumps(
                {
                    "summary": self.summary(),
                    "deadline_ms": self.deadline_ms,
                    "window": {**asdict(self.window), "victim_jobs": sorted(self.window.victim_jobs)},
                    "promises": [
                        {
                            **asdict(p),
                            "must": sorted(p.must),
                            "may": sorted(p.may),
                            "shard": shard_of_task_id(p.task_id),
                        }
                        for p in self.promises.values()
                    ],
                    "callbacks": [asdict(c) for c in self.callbacks],
                    "flows": [asdict(f) for f in self.flows],
                }
            )
        )
        return path

    def latest_instant(self) -> str:
        """The latest first send of the run, for its figure line: how late, the task, shard and server, its
        instant and create ack relative to the fault's start, its flow's commit, and the node that sent it,
        so a rare tail (an instant far later than the fault) can be traced from the line alone."""
        if not self.figures.first_send_late_ms:
            return "latest=none"
        (task_id, instant), late = max(self.figures.first_send_late_ms.items(), key=lambda item: item[1])
        start = self.window.start_ms
        promise = self.promises[task_id]
        sent = min(
            (c for c in self.callbacks if c.task_id == task_id and c.scheduled_at_ms == instant),
            key=lambda c: c.received_ms,
            default=None,
        )
        committed = [f.created_at_ms for f in self.flows if f.task_id == task_id and f.scheduled_at_ms == instant]
        return (
            f"latest={late}ms task {task_id} shard {shard_of_task_id(task_id)} server {promise.server} "
            f"{'interval' if len(promise.may) > 1 else 'one-shot'} due fault{instant - start:+d}ms "
            f"acked fault{promise.create_acked_ms - start:+d}ms"
            + (f" flow committed fault{committed[0] - start:+d}ms" if committed else "")
            + (f" sent by {sent.sender.rsplit('/', 1)[-1]}" if sent is not None else "")
        )

    def summary(self) -> str:
        f = self.figures
        late = list(f.first_send_late_ms.values())
        parts = [
            f"chaos {self.window.what} [{self.profile.name}]",
            f"expected={f.expected} delivered={f.delivered}",
            *(f"{name}={count}" for name, count in self.counts().items()),
            f"unknown_task_callbacks={f.unknown_task_callbacks}",
            f"requests={len(self.callbacks)} flows={len(self.flows)}",
            f"late_ms p50={percentile(late, 0.5)} p99={percentile(late, 0.99)} max={max(late, default=0)}",
            f"fault={self.window.end_ms - self.window.start_ms}ms",
            self.latest_instant(),
        ]
        if self.window.victim_server is not None:
            healthy = self.healthy_first_send_late_ms()
            parts.append(
                f"healthy_server n={len(healthy)} p99={percentile(healthy, 0.99)}ms max={max(healthy, default=0)}ms"
            )
            creates = self.healthy_create_ms()
            parts.append(
                f"healthy_creates_in_fault n={len(creates)} p99={percentile(creates, 0.99)}ms "
                f"max={max(creates, default=0)}ms"
            )
        if self.window.victim_jobs:
            victim = self.victim_delivered_late_ms()
            parts.append(f"victim_due_in_fault n={len(victim)} max={max(victim, default=0)}ms")
        parts.extend(f"{key}={value}" for key, value in self.notes.items())
        parts.append("load={:.2f},{:.2f},{:.2f}".format(*self.load))
        return " | ".join(parts)


async def _sleep_until(epoch_ms: int) -> None:
    wait_ms = epoch_ms - now_ms()
    if wait_ms > 0:
        await asyncio.sleep(wait_ms / 1000)


async def _start_cluster(rig: ClusterRig, api: Api) -> None:
    for index in range(1, NODES + 1):
        rig.start(index)
    for node in rig.live():
        await api.wait_healthy(node)
    await api.wait_stable(NODES)


async def _wait_delivered(client: ChaosClient, receiver: ChaosReceiver, rig: ClusterRig, deadline_ms: int) -> None:
    """Until every must-instant has a 2xx reply, or the deadline."""
    while now_ms() < deadline_ms:
        delivered = {(c.task_id, c.scheduled_at_ms) for c in receiver.callbacks if c.delivered}
        owed = ((p.task_id, instant) for p in promises(rig, client.book).values() for instant in p.must)
        if all(key in delivered for key in owed):
            return
        await asyncio.sleep(0.5)


async def run(rig: ClusterRig, receiver: ChaosReceiver, profile: Profile, fault: Fault) -> Outcome:
    rig.overrides = profile.overrides()
    api = Api(rig)
    try:
        await _start_cluster(rig, api)
    except BaseException:
        await api.close()
        raise
    client = ChaosClient(rig.nodes[1], receiver.url())  # node 1 is the API entry; faults spare it
    try:
        await client.create_app()
        start_ms = math.ceil((now_ms() + 4000 + 25 * profile.interval_tasks) / 1000) * 1000
        end_ms = start_ms + int(profile.window_s * 1000)
        await register_intervals(client, profile.interval_tasks, start_ms, end_ms, profile.every_ms)
        stream = asyncio.create_task(stream_one_shots(client, profile.one_shots_per_s, end_ms - 4000))
        await _sleep_until(start_ms + 3500)
        interval_ids = [t for t, r in client.book.tasks.items() if len(r.instants) > 1]
        for index, task_id in enumerate(interval_ids[: 2 * profile.stops]):
            await client.stop(task_id, "pause" if index % 2 == 0 else "delete")
        await _sleep_until(start_ms + int(profile.fault_at_s * 1000))
        stage = Stage(rig, api, client, receiver, profile, end_ms)
        window = await fault(stage)
        await stream
        last_instant = max(max(r.instants) for r in client.book.tasks.values())
        deadline_ms = max(last_instant, window.end_ms) + int(profile.settle_s * 1000)
        await _wait_delivered(client, receiver, rig, deadline_ms)
        await asyncio.sleep(QUIET_AFTER_S)
        flows = await asyncio.to_thread(read_flows, rig, client.app_id)
        unreadable = await client.unreadable()
        owed = promises(rig, client.book)
        callbacks = list(receiver.callbacks)
        figures = account(
            owed,
            callbacks,
            flows,
            deadline_ms=deadline_ms,
            unreadable=sorted(unreadable),
            unanswered_creates=client.book.unanswered_creates,
            unconfirmed=promises(rig, client.book, unconfirmed=True),
        )
        outcome = Outcome(profile, window, figures, owed, callbacks, flows, deadline_ms)
        outcome.notes["creates_unanswered"] = client.book.unanswered_creates
        outcome.notes["creates_refused"] = client.book.refused_creates
        outcome.notes["creates_storage_unavailable"] = client.book.unavailable_creates
        outcome.notes["creates_outcome_unknown"] = len(client.book.unconfirmed)
        outcome.notes["ids_named_twice"] = len(client.book.named_twice)
        outcome.notes["outcome_flush"] = outcome_flush()
        if unreadable:
            outcome.notes["unreadable_answers"] = ",".join(sorted(set(unreadable.values())))
        OUTCOMES.append(outcome)
        if os.environ.get("TJOBS_TEST_CHAOS_DUMP_DIR"):
            outcome.dump(os.environ["TJOBS_TEST_CHAOS_DUMP_DIR"])
        return outcome
    finally:
        await client.close()
        await api.close()


def assert_clean(outcome: Outcome) -> None:
    """0 lost, 0 duplicate flows, 0 phantom, every 201 readable, no attempt number sent twice, no task id
    named by two creates' answers."""
    f = outcome.figures
    detail = (
        f"\nfirst lost: {f.lost[:5]}\nfirst duplicated: {f.duplicate_flows[:5]}\nfirst phantom: "
        f"{f.phantom[:5]}\nfirst unreadable: {f.unreadable[:5]}\nfirst reused attempts: {f.attempt_reuse[:5]}"
    )
    assert outcome.counts() == dict.fromkeys(outcome.counts(), 0), outcome.summary() + detail
    assert not outcome.notes.get("ids_named_twice"), outcome.summary()


def profiles(quick: Profile | None = QUICK) -> list[Any]:
    """The quick run (in the default selection, ``.ci/run``; ``None``: none), then the long ones under
    ``chaos``: the rig's fast settings and the product defaults (cycle 300 s, fire_soon)."""
    import pytest

    long_marks = [pytest.mark.chaos, pytest.mark.timeout(900)]
    return [
        *([] if quick is None else [pytest.param(quick, id=quick.name)]),
        pytest.param(LONG, id=LONG.name, marks=long_marks),
        pytest.param(LONG.with_defaults(), id="long-defaults", marks=long_marks),
    ]
