"""What a secondary index of the shard tables costs MariaDB per fire and per outcome: A/B, with and without.

::

    python -m benchmarks index_cost --storage mysql+asyncmy://root@127.0.0.1:3391 \\
        --drop flows:app_status [--drop tasks:app_status ...] [--kind at|interval] [--pairs 3]

One fresh prefix per variant on one server, migrated alike (``tjidx_<hex>_0``, ``_1``, ..., dropped
afterwards): ``_0`` keeps every index, and each ``--drop`` adds a variant without the indexes it names on
every shard table (``flows:app_status`` is ``flows_TT_app_status`` of every ``flows_TT``). All are
preloaded alike (``--preload`` delivered flows and completed tasks per table, so the indexes are not
trivially small). Then, ``--pairs`` rounds of every variant, interleaved (the order rotated by one from one
round to the next: A B, B A, ... with two): per round and prefix, ``--tasks`` fresh tasks of one kind (``at``: a
one-shot, completed by its fire; ``interval``: periodic, advanced by it), due now, are fired through the
store (:meth:`commit_fires`, batches of ``--batch`` intents in random order, so spread over the shards as
a node's are), then each flow gets its final outcome (:meth:`record_flow_updates`, ``delivered`` with an
attempt history of one send, ``--flush`` outcomes a call, as the deliverer's flush). Each phase is one
window of the server's CPU (``/proc``) and status counters (:mod:`benchmarks._db_cost`), closed once
InnoDB's purge has caught up (its undo history back to where it was: the delete-marked index entries a
phase left are removed within its window), net of the server's quiet rate measured just before. The
store alone: no node, no delivery; every client of the server counts, so run it alone on the server.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import secrets
import time
from dataclasses import dataclass
from typing import Any

import pymysql
from sqlalchemy.engine import make_url

from benchmarks._db_cost import DbProbe, Span, per_op_net_of_quiet
from sharding import TaskIdGenerator
from testkit.databases import drop_databases
from tjobs.firing.planner import FirePolicy, plan_fire
from tjobs.model import (
    AttemptLog,
    AttemptRecord,
    DeliveryMode,
    FireIntent,
    FirePlan,
    FlowStatus,
    FlowUpdate,
    MisfirePolicy,
    Task,
    TaskStatus,
)
from tjobs.settings import StorageSettings
from tjobs.specs import AtSpec, CallbackSpec, IntervalSpec
from tjobs.stores.migrate import migrate
from tjobs.stores.sqlalchemy import SQLAlchemyTaskStore

NOW_MS = 1_800_000_000_000  # 2027-01-15T08:00:00Z
POLICY = FirePolicy(misfire_threshold_ms=3_600_000, catch_up_max=1)
QUIET_S = 2.0
PURGE_WAIT_S = 60.0


def planner(task: Task, intent: FireIntent, now_ms: int) -> FirePlan | None:
    return plan_fire(task, intent, now_ms, POLICY)


def _task(task_id: int, kind: str) -> Task:
    schedule: Any = AtSpec(NOW_MS) if kind == "at" else IntervalSpec(60_000, NOW_MS)
    return Task(
        task_id,
        "bench",
        f"t{task_id}",
        None,
        schedule,
        CallbackSpec(("https://receiver.example/hook",)),
        {"n": 1},
        MisfirePolicy.FIRE_NOW,
        DeliveryMode.AT_LEAST_ONCE,
        TaskStatus.ACTIVE,
        NOW_MS,
        1,
        0,
        NOW_MS,
        NOW_MS,
    )


def _outcome(task_id: int) -> FlowUpdate:
    record = AttemptRecord(1, NOW_MS + 5, 12, 200, None, "https://receiver.example/hook")
    return FlowUpdate(task_id, NOW_MS, FlowStatus.DELIVERED, 1, None, 200, None, None, AttemptLog((record,), 1))


class Server:
    """The bench's own SQL connection to the server: its tables, index drops, preload and purge state."""

    def __init__(self, url: str) -> None:
        server = make_url(url)
        self.connection: pymysql.Connection[Any] = pymysql.connect(
            host=server.host, port=server.port or 3306, user=server.username or "root",
            password=server.password or "", autocommit=True,
        )  # fmt: skip

    def run(self, sql: str, params: Any = None) -> list[tuple[Any, ...]]:
        with self.connection.cursor() as cursor:
            cursor.execute(sql, params)
            return list(cursor.fetchall())

    def tables(self, prefix: str, kind: str) -> list[tuple[str, str]]:
        return [
            (str(schema), str(name))
            for schema, name in self.run(
                "SELECT table_schema, table_name FROM information_schema.tables "
                "WHERE table_schema LIKE %s AND table_name REGEXP %s ORDER BY 1, 2",
                (f"{prefix}\\_%", f"^{kind}_[0-9]+$"),
            )
        ]

    def drop_index(self, prefix: str, kind: str, suffix: str) -> int:
        tables = self.tables(prefix, kind)
        for schema, name in tables:
            self.run(f"ALTER TABLE `{schema}`.`{name}` DROP INDEX `{name}_{suffix}`, ALGORITHM=INPLACE, LOCK=NONE")
        return len(tables)

    def preload(self, prefix: str, rows: int) -> None:
        """``rows`` delivered flows and completed one-shot tasks per shard table, keys apart from the bench's
        (small ids, instants before the bench's)."""
        if rows <= 0:
            return
        for schema, name in self.tables(prefix, "flows"):
            self.run(
                f"INSERT INTO `{schema}`.`{name}` (task_id, scheduled_at, app_id, kind, status, attempts, "
                "next_attempt_at, missed, last_status_code, last_error, created_at, updated_at) "
                f"SELECT seq, {NOW_MS} - 1000 * seq, 'bench', 'scheduled', 'delivered', 1, NULL, 0, 200, NULL, "
                f"{NOW_MS} - 1000 * seq, {NOW_MS} - 1000 * seq FROM `{schema}`.seq_1_to_{rows}"
            )
        for schema, name in self.tables(prefix, "tasks"):
            self.run(
                f"INSERT INTO `{schema}`.`{name}` (id, app_id, name, idem_key, status, next_run_at, version, "
                "fire_count, schedule, callback, payload, misfire_policy, delivery, created_at, updated_at) "
                f"SELECT seq, 'bench', CONCAT('old', seq), NULL, 'completed', NULL, 2, 1, "
                f'CONCAT(\'{{"kind": "at", "at_ms": \', {NOW_MS} - 1000 * seq, \'}}\'), '
                "'{\"urls\": [\"https://receiver.example/hook\"]}', '{}', 'fire_now', 'at_least_once', "
                f"{NOW_MS} - 1000 * seq, {NOW_MS} - 1000 * seq FROM `{schema}`.seq_1_to_{rows}"
            )

    def history(self) -> int:
        rows = self.run("SELECT count FROM information_schema.INNODB_METRICS WHERE name = 'trx_rseg_history_len'")
        return int(rows[0][0]) if rows else 0

    def settle(self, baseline: int) -> float:
        """Wait until purge has taken the undo history back to ``baseline`` (or PURGE_WAIT_S); seconds waited."""
        started = time.monotonic()
        while self.history() > baseline + 50 and time.monotonic() - started < PURGE_WAIT_S:
            time.sleep(0.2)
        return time.monotonic() - started


@dataclass
class Prefix:
    label: str  # the indexes dropped, or "all"
    settings: StorageSettings
    store: SQLAlchemyTaskStore
    ids: TaskIdGenerator
    minted: int = 0


async def _phase(probe: DbProbe, server: Server, ops: int, work: Any) -> dict[str, Any] | None:
    baseline = server.history()
    quiet_start, t0 = probe.read(), time.monotonic()
    await asyncio.sleep(QUIET_S)
    quiet: Span = (quiet_start, probe.read(), time.monotonic() - t0)
    before, t1 = probe.read(), time.monotonic()
    await work()
    server.settle(baseline)
    window: Span = (before, probe.read(), time.monotonic() - t1)
    return per_op_net_of_quiet(window, ops, quiet)


async def _round(prefix: Prefix, probe: DbProbe, server: Server, args: argparse.Namespace) -> dict[str, Any]:
    tasks = []
    for _ in range(args.tasks):
        prefix.minted += 1
        tasks.append(_task(prefix.ids.mint(prefix.minted % prefix.ids.shard_count, NOW_MS + prefix.minted), args.kind))
    for start in range(0, len(tasks), 1000):
        await prefix.store.insert_tasks(tasks[start : start + 1000])
    server.settle(0)
    intents = [FireIntent(t.id, NOW_MS, t.version) for t in tasks]
    random.Random(prefix.minted).shuffle(intents)

    async def fire() -> None:
        for start in range(0, len(intents), args.batch):
            outcomes = await prefix.store.commit_fires(intents[start : start + args.batch], NOW_MS + 10, planner)
            if any(outcome.task is None or len(outcome.flows) != 1 for outcome in outcomes):
                raise RuntimeError("a fire did not commit one flow")

    async def outcomes() -> None:
        ids = [intent.task_id for intent in intents]
        for start in range(0, len(ids), args.flush):
            await prefix.store.record_flow_updates([_outcome(i) for i in ids[start : start + args.flush]], NOW_MS + 50)

    return {
        "fire": await _phase(probe, server, len(intents), fire),
        "outcome": await _phase(probe, server, len(intents), outcomes),
    }


def _brief(phase: dict[str, Any] | None) -> dict[str, Any]:
    if phase is None or phase["net"] is None:
        return {}
    counters = phase["net"]["counters"]
    return {
        "cpu_us": phase["net"]["mariadb_cpu_us"],
        "statements": phase["net"]["statements"],
        "log_bytes": counters.get("Innodb_os_log_written"),
        "opened_tables": counters.get("Opened_tables"),
        "seconds": phase["seconds"],
    }


async def run(args: argparse.Namespace) -> list[dict[str, Any]]:
    tag = secrets.token_hex(3)
    variants: list[list[str]] = [[], *([spec for spec in drop.split(",") if spec] for drop in args.drop)]
    prefixes: list[Prefix] = []
    server = Server(args.storage)
    probe = DbProbe(args.storage)
    if probe.pid is None:
        raise SystemExit("the server's pid file cannot be read: no CPU figure")
    results: list[dict[str, Any]] = []
    try:
        for number, drops in enumerate(variants):
            settings = StorageSettings(
                urls=[args.storage], topology=args.topology, database_prefix=f"tjidx_{tag}_{number}"
            )
            await migrate(settings)
            store = SQLAlchemyTaskStore(settings)
            await store.start()
            label = "+".join(drops) or "all"
            prefixes.append(Prefix(label, settings, store, TaskIdGenerator(len(store.layout.shards))))
            server.preload(settings.database_prefix, args.preload)
            for spec in drops:
                kind, suffix = spec.split(":", 1)
                server.drop_index(settings.database_prefix, kind, suffix)
        for pair in range(args.pairs):
            shift = pair % len(prefixes)
            order = prefixes[shift:] + prefixes[:shift]  # A B, B A, ... with two
            for prefix in order:
                phases = await _round(prefix, probe, server, args)
                row = {
                    "pair": pair,
                    "without": prefix.label,
                    "fire": _brief(phases["fire"]),
                    "outcome": _brief(phases["outcome"]),
                }
                print(json.dumps(row), flush=True)
                results.append(row)
    finally:
        for prefix in prefixes:
            await prefix.store.close()
            drop_databases(prefix.settings)
        probe.close()
        server.connection.close()
    return results


def _summary(results: list[dict[str, Any]]) -> None:
    for label in dict.fromkeys(r["without"] for r in results):
        rows = [r for r in results if r["without"] == label]
        fire = [r["fire"].get("cpu_us") or 0.0 for r in rows]
        outcome = [r["outcome"].get("cpu_us") or 0.0 for r in rows]
        both = [f + o for f, o in zip(fire, outcome, strict=True)]
        print(f"without {label}: fire {_fmt(fire)} us, outcome {_fmt(outcome)} us, fire+outcome {_fmt(both)} us")


def _fmt(values: list[float]) -> str:
    return "/".join(f"{v:.1f}" for v in values) + f" (mean {sum(values) / max(len(values), 1):.1f})"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks index_cost", description=(__doc__ or "").splitlines()[0]
    )
    parser.add_argument("--storage", required=True, help="a MariaDB URL (mysql+asyncmy://...)")
    parser.add_argument(
        "--drop",
        action="append",
        default=[],
        help="one more variant: the indexes it drops, kind:suffix[,kind:suffix...] (flows:app_status)",
    )
    parser.add_argument("--kind", choices=("at", "interval"), default="at")
    parser.add_argument("--topology", default="8x4x16")
    parser.add_argument("--tasks", type=int, default=20_000, help="fires per round and prefix")
    parser.add_argument("--batch", type=int, default=50, help="intents per fire transaction")
    parser.add_argument("--flush", type=int, default=500, help="outcomes per flush")
    parser.add_argument("--preload", type=int, default=200, help="flows and tasks per shard table")
    parser.add_argument("--pairs", type=int, default=3)
    args = parser.parse_args(argv)
    results = asyncio.run(run(args))
    _summary(results)


if __name__ == "__main__":
    main()
