"""Moving a logical database to another MariaDB server while a node fires (issue 17).

::

    python -m benchmarks shard_move --tasks 1000000 --rate 2000 --window-s 600 --move-at-s 30

Starts two MariaDB servers of its own (``mariadbd`` on free loopback ports, data in a temporary
directory, stopped by their PIDs at the end; ``--source-url`` uses a running server as the source
instead), one node on both (topology 8x4x16, so logical databases 0-3 sit on the first server) and the
callback sink. Then, straight into the shard tables (bulk multi-row ``INSERT``; valid tasks of the
bench's app, ids minted for their shards):

- ``--tasks`` one-shot tasks due in 30 days (they never fire) into logical database ``--db`` (the
  one moved), its 16 shards evenly: the bulk of the copy;
- ``--rate`` × ``--window-s`` one-shot tasks due across the window, at ``--rate`` per second, on random
  shards of all 512 (1/32 of them in the moved database), calling the sink.

``--move-at-s`` into the window it runs ``tjobs shards move --db N --to <second server>`` (the CLI, a
process of its own, with the node's config, paced as ``--copy-duty`` / ``--max-rows-per-s`` say, under
py-spy with ``--profile-mover``) and reads the steps off its output as they come, and the
move's record afterwards (rows copied, the cut-over pause the mover measured). After the window and
the drain the sink's callbacks are matched against the due tasks (:func:`benchmarks.report.account`):
lateness p50/p99/max of the moved database's fires and of the others', before, during and after the
move (by scheduled instant); the largest gap between two callbacks of each during the move (the
firing pause as the receiver saw it); missing and duplicate fires, which must be 0.

The node runs with ``scheduler.cycle_s = 10`` and ``load_lead_s = 5`` unless ``--cycle-s`` and
``--load-lead-s`` say otherwise (the cluster rig's kind of cycle): the due tasks are written straight
into the tables, so only a cycle load brings them into the wheel, and the window starts once they are
all in, a cycle and the load lead later (with the default 300 s cycle, 5 minutes after seeding). So
every fire here goes through a cycle load, which the copy slows. The window must outlast the move:
with a window that ends first, the "during" figures cover only part of it (a warning says so).
"""

from __future__ import annotations

import argparse
import asyncio
import bisect
import contextlib
import itertools
import json
import math
import os
import random
import resource
import secrets
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
import pymysql
from aiohttp import ClientSession
from sqlalchemy.engine import make_url

from benchmarks.report import Delivery, Percentiles, account, machine
from sharding import Topology, shard_of_task_id
from sharding.ids import ID_EPOCH_MS
from testkit.databases import drop_databases
from testkit.node_process import node_process, process_cpu_s
from testkit.own_mariadb import own_mariadb
from testkit.sink import CallbackRecords, SinkConfig, SinkProcess
from tjobs.model import DeliveryMode, MisfirePolicy, Task, TaskStatus
from tjobs.settings import StorageSettings
from tjobs.specs import AtSpec, CallbackSpec
from tjobs.stores.schema import TASK_COLUMNS, task_to_row
from tjobs.stores.sql_layout import Layout

TOPOLOGY = "8x4x16"
PARKED_DUE_IN_MS = 30 * 86_400_000  # the moved database's bulk: due in 30 days, never fired in the run
INSERT_ROWS = 2000  # rows per multi-row INSERT while seeding
NODE_SETTINGS: dict[str, Any] = {"rate_limits": {"enabled": False}}  # and the scheduler's cycle (options)
_RANDOM_BITS, _SHARD_BITS = 12, 10


# ---- the accounting (pure) -----------------------------------------------------------------------


def mint_ids(shard_of_each: Sequence[int], base_ms: int) -> list[int]:
    """One distinct task id per entry of ``shard_of_each``, minted for that shard: the ``k``-th id of a
    shard carries the instant ``base_ms + k // 4096`` and ``k % 4096`` in its random bits, so ids never
    repeat within a call. Give calls disjoint ``base_ms`` ranges, in the past (where the node's own
    minting, at its clock's now, never goes)."""
    counts: dict[int, int] = {}
    ids = []
    for shard in shard_of_each:
        k = counts.get(shard, 0)
        counts[shard] = k + 1
        elapsed = base_ms - ID_EPOCH_MS + (k >> _RANDOM_BITS)
        ids.append(
            (elapsed << (_SHARD_BITS + _RANDOM_BITS)) | (shard << _RANDOM_BITS) | (k & ((1 << _RANDOM_BITS) - 1))
        )
    return ids


def database_of(task_id: int, topology: Topology) -> int:
    """The logical database of a task id's shard."""
    return topology.locate(shard_of_task_id(task_id)).database_index


def split_registered(
    registered: Mapping[int, int], moved: Callable[[int], bool]
) -> tuple[dict[int, int], dict[int, int]]:
    """``registered`` (task id → instant) split into the tasks ``moved`` says are in the moved
    database, and the others."""
    inside: dict[int, int] = {}
    outside: dict[int, int] = {}
    for task_id, instant in registered.items():
        (inside if moved(task_id) else outside)[task_id] = instant
    return inside, outside


def only_records_of(records: CallbackRecords, keep: Callable[[int], bool]) -> CallbackRecords:
    """The callbacks of the task ids ``keep`` accepts (so a group's accounting sees no other group's
    callbacks as unexpected)."""
    kept = CallbackRecords(executor_ids=list(records.executor_ids))
    for row in zip(
        records.recv_us,
        records.task_id,
        records.scheduled_ms,
        records.flow,
        records.attempt,
        records.executor,
        strict=True,
    ):
        if keep(row[1]):
            kept.append(*row)
    return kept


def lateness_between(delivery: Delivery, from_ms: int, until_ms: int) -> Percentiles:
    """Lateness of the fires whose scheduled instant is in ``[from_ms, until_ms)``."""
    by_instant = delivery.lateness_by_instant  # sorted by instant
    low = bisect.bisect_left(by_instant, (from_ms, -math.inf))
    high = bisect.bisect_left(by_instant, (until_ms, -math.inf))
    return Percentiles.of([late for _, late in by_instant[low:high]])


def largest_gap_ms(receipts_us: Sequence[int], from_ms: int, until_ms: int) -> float | None:
    """The longest stretch in ``[from_ms, until_ms]`` with no receipt (``receipts_us`` sorted, epoch µs):
    the gaps between consecutive receipts inside it, and from its start to the first and from the
    last to its end. None for an empty interval."""
    if until_ms <= from_ms:
        return None
    start_us, end_us = from_ms * 1000, until_ms * 1000
    low = bisect.bisect_left(receipts_us, start_us)
    high = bisect.bisect_right(receipts_us, end_us)
    points = [start_us, *receipts_us[low:high], end_us]
    return max(b - a for a, b in itertools.pairwise(points)) / 1000


@dataclass(frozen=True)
class Phases:
    """The window and the move within it (epoch ms); the cut-over as the mover's output showed it."""

    window_start_ms: int
    window_end_ms: int
    move_start_ms: int
    move_end_ms: int
    cut_over_start_ms: int | None = None
    cut_over_end_ms: int | None = None

    def spans(self) -> dict[str, tuple[int, int]]:
        return {
            "before": (self.window_start_ms, self.move_start_ms),
            "during": (self.move_start_ms, self.move_end_ms),
            "after": (self.move_end_ms, self.window_end_ms),
        }


def group_figures(delivery: Delivery, phases: Phases) -> dict[str, Any]:
    """One group's (the moved database's, or the others') delivery: counts, lateness over the whole
    window and per phase, the largest receipt gap during the move."""
    whole = Percentiles.of(delivery.lateness_ms, presorted=True)
    figures: dict[str, Any] = {
        "due": delivery.registered,
        "delivered": delivery.delivered,
        "missing": delivery.missing,
        "duplicates": delivery.duplicates,
        "scheduled_mismatch": delivery.scheduled_mismatch,
        "lateness_ms": _lateness_json(whole),
    }
    for phase, (start, end) in phases.spans().items():
        figures[f"lateness_{phase}_move_ms"] = _lateness_json(lateness_between(delivery, start, end))
    move_s = (phases.move_end_ms - phases.move_start_ms) / 1000
    if move_s > 0:  # callbacks received during the move, per second: did the node keep up with the rate
        figures["received_per_s_during_move"] = _round(delivery.fires_in_window(phases.move_start_ms, move_s) / move_s)
    figures["by_10s"] = timeline(
        delivery, phases.window_start_ms, (phases.window_end_ms - phases.window_start_ms) / 1000, 10
    )
    figures["largest_gap_during_move_ms"] = _round(
        largest_gap_ms(delivery.first_receipts_us, phases.move_start_ms, phases.move_end_ms)
    )
    if phases.cut_over_start_ms is not None and phases.cut_over_end_ms is not None:
        # fires due from the cut-over's start to 1 s after its end: the ones the pause holds back
        held = lateness_between(delivery, phases.cut_over_start_ms, phases.cut_over_end_ms + 1000)
        figures["lateness_around_cut_over_ms"] = _lateness_json(held)
        figures["around_cut_over_by_250ms"] = timeline(delivery, phases.cut_over_start_ms - 2000, 6.0, 0.25)
    return figures


def timeline(delivery: Delivery, start_ms: int, span_s: float, slice_s: float) -> list[dict[str, Any]]:
    """Per ``slice_s`` of scheduled instants from ``start_ms`` for ``span_s``: fires, p99 and max
    lateness (``from_s`` relative to ``start_ms``)."""
    return [entry for entry in delivery.lateness_by_slice(start_ms, slice_s) if 0 <= entry["from_s"] < span_s]


def account_groups(
    registered: Mapping[int, int],
    records: CallbackRecords,
    groups: Mapping[str, Callable[[int], bool]],
    phases: Phases,
) -> dict[str, Any]:
    """Every due task's callbacks matched: the whole run (unexpected callbacks counted), then each of
    ``groups`` (name → which task ids are in it) on its own (:func:`group_figures`)."""
    overall = account(registered, records)
    figures: dict[str, Any] = {
        "due": overall.registered,
        "delivered": overall.delivered,
        "missing": overall.missing,
        "duplicates": overall.duplicates,
        "unexpected": overall.unexpected,
        "retried_callbacks": overall.retried,
    }
    for name, member in groups.items():
        inside, _ = split_registered(registered, member)
        figures[name] = group_figures(account(inside, only_records_of(records, member)), phases)
    return figures


def _lateness_json(values: Percentiles) -> dict[str, Any]:
    return {"n": values.count, "p50": _round(values.p50), "p99": _round(values.p99), "max": _round(values.max)}


def _round(value: float | None, digits: int = 1) -> float | None:
    return None if value is None else round(value, digits)


# ---- servers and seeding -------------------------------------------------------------------------


@contextlib.contextmanager
def bench_mariadb(directory: Path, buffer_pool: str, redo_log: str) -> Iterator[tuple[str, int]]:
    """A mariadbd of our own (:func:`testkit.own_mariadb.own_mariadb`), its data in ``directory``,
    sized for the bench (buffer pool and redo log as docs/operations.md advises); yields its URL and PID."""
    args = (
        "--max-connections=1000", f"--innodb-buffer-pool-size={buffer_pool}", "--table-definition-cache=4096",
        "--table-open-cache=4096", "--innodb-open-files=4096", f"--innodb-log-file-size={redo_log}",
    )  # fmt: skip
    with contextlib.ExitStack() as stack:
        try:
            server = stack.enter_context(own_mariadb(directory, *args, start_timeout_s=120, stop_timeout_s=60))
        except RuntimeError as error:  # it did not start: say so, no traceback
            raise SystemExit(str(error)) from None
        yield server.url, server.pid


def _connect(url: str) -> pymysql.Connection[Any]:
    server = make_url(url)
    return pymysql.connect(
        host=server.host,
        port=server.port or 3306,
        user=server.username or "root",
        password=server.password or "",
        autocommit=True,
    )


def one_shot(task_id: int, app_id: str, at_ms: int, callback: CallbackSpec, now_ms: int) -> Task:
    """A one-shot task due at ``at_ms``, as the API would have stored it."""
    return Task(
        task_id,
        app_id,
        f"move-bench-{task_id}",
        None,
        AtSpec(at_ms),
        callback,
        {},
        MisfirePolicy.FIRE_NOW,
        DeliveryMode.AT_LEAST_ONCE,
        TaskStatus.ACTIVE,
        at_ms,
        1,
        0,
        now_ms,
        now_ms,
    )


def seed(layout: Layout, tasks: Sequence[Task]) -> None:
    """Write ``tasks`` into their shards' task tables, ``INSERT_ROWS`` rows a statement, one connection
    per server (blocking: run it in a thread)."""
    by_table: dict[tuple[str, str], list[Task]] = {}
    for task in tasks:
        home = layout.shards[shard_of_task_id(task.id)]
        by_table.setdefault((home.database.engine_url, home.tasks_sql), []).append(task)
    columns = ", ".join(f"`{column}`" for column in TASK_COLUMNS)
    row_sql = "(" + ", ".join(["%s"] * len(TASK_COLUMNS)) + ")"
    connections: dict[str, pymysql.Connection[Any]] = {}
    try:
        for (url, table), made in by_table.items():
            connection = connections.get(url) or connections.setdefault(url, _connect(url))
            with connection.cursor() as cursor:
                for start in range(0, len(made), INSERT_ROWS):
                    chunk = made[start : start + INSERT_ROWS]
                    values = [value for task in chunk for value in _values(task)]
                    cursor.execute(
                        f"INSERT INTO {table} ({columns}) VALUES " + ", ".join([row_sql] * len(chunk)), values
                    )
    finally:
        for connection in connections.values():
            connection.close()


def _values(task: Task) -> tuple[Any, ...]:
    row = task_to_row(task)
    return tuple(row[column] for column in TASK_COLUMNS)


def read_move(url: str, schema: str, database: int) -> dict[str, Any] | None:
    """The move's record (``tjobs_shard_moves`` in the first logical database)."""
    connection = _connect(url)
    try:
        with connection.cursor() as cursor:
            cursor.execute(
                f"SELECT state, rows_copied, lag_rows, started_at_ms, finished_at_ms, cut_over_pause_ms, epoch "
                f"FROM `{schema}`.tjobs_shard_moves WHERE database_index = %s",
                (database,),
            )
            found = cursor.fetchone()
    finally:
        connection.close()
    if found is None:
        return None
    names = ("state", "rows_copied", "lag_rows", "started_at_ms", "finished_at_ms", "cut_over_pause_ms", "epoch")
    return dict(zip(names, found, strict=True))


def load_average() -> str:
    return " ".join(f"{value:.2f}" for value in os.getloadavg())


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def say(line: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {line}", file=sys.stderr, flush=True)


async def drain(
    sink: SinkProcess, expected: int, window_end_ms: int, timeout_s: float, loads: dict[str, str]
) -> CallbackRecords:
    """Wait until the sink has had a callback for ``expected`` tasks and the window has ended, at most
    ``timeout_s`` past its end, then 2 s more for late duplicates; note the load average then as
    ``loads["end"]`` and return what the sink received (this bench and online_migration)."""
    deadline = window_end_ms + round(timeout_s * 1000)
    while True:
        stats = await sink.stats()
        if (stats.tasks >= expected and now_ms() >= window_end_ms) or now_ms() >= deadline:
            break
        await asyncio.sleep(1.0)
    await asyncio.sleep(2.0)  # late duplicates
    loads["end"] = load_average()
    return await sink.records()


# ---- the run -------------------------------------------------------------------------------------


@dataclass
class MoveRun:
    command: list[str]
    started_ms: int = 0
    ended_ms: int = 0
    returncode: int | None = None
    lines: list[tuple[int, str]] = field(default_factory=list)  # (epoch ms read, line) of its output

    def first(self, text: str) -> int | None:
        return next((at for at, line in self.lines if text in line), None)


async def run_mover(command: list[str]) -> MoveRun:
    """Run the mover's CLI, timestamping each line of its output as it comes."""
    move = MoveRun(command)
    environment = {**os.environ, "PYTHONUNBUFFERED": "1"}
    move.started_ms = now_ms()
    process = await asyncio.create_subprocess_exec(
        *command, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT, env=environment
    )
    assert process.stdout is not None
    last_progress = 0.0
    async for raw in process.stdout:
        line = raw.decode(errors="replace").rstrip()
        move.lines.append((now_ms(), line))
        if ("copied" not in line and "catching up:" not in line) or time.monotonic() - last_progress > 10:
            say(f"mover: {line}")
            last_progress = time.monotonic()
    move.returncode = await process.wait()
    move.ended_ms = now_ms()
    return move


async def create_app(session: ClientSession, base_url: str, admin_key: str) -> tuple[str, str]:
    """Create the bench's app; its id and API key."""
    body = {
        "name": "move-bench",
        "rate_limit_per_s": 100_000,
        "max_concurrency": 100,
        "allowed_callback_hosts": ["127.0.0.1"],
        "api_rate_limit_per_s": 1_000_000,
        "create_rate_limit_per_s": 1_000_000,
    }
    headers = {"Authorization": f"Bearer {admin_key}", "Content-Type": "application/json"}
    async with session.post(f"{base_url}/v1/apps", data=orjson.dumps(body), headers=headers) as response:
        raw = await response.read()
        if response.status != 201:
            raise SystemExit(f"POST /v1/apps answered {response.status}: {raw[:300]!r}")
    created = orjson.loads(raw)
    return str(created["id"]), str(created["api_key"])


async def bench(args: argparse.Namespace, urls: list[str], server_pids: Mapping[str, int]) -> dict[str, Any]:
    prefix = f"tjbench_{secrets.token_hex(3)}"
    storage = StorageSettings(urls=urls, topology=TOPOLOGY, database_prefix=prefix)
    layout = Layout(storage)
    topology = layout.topology
    if layout.databases[args.db].engine_url != layout.databases[0].engine_url or args.db == 0:
        raise SystemExit(f"--db must be one of 1..3 (on the first server with topology {TOPOLOGY})")
    target = urls[1].split("@", 1)[1]
    warnings: list[str] = []
    loads = {"start": load_average()}
    try:
        scheduler = {"cycle_s": args.cycle_s, "load_lead_s": args.load_lead_s}
        settings = {**NODE_SETTINGS, "scheduler": scheduler, "storage": {"database_prefix": prefix}}
        node_dir = Path(args.node_dir) if args.node_dir else None
        with node_process(storage_urls=urls, topology=TOPOLOGY, settings=settings, work_dir=node_dir) as node:
            say(f"node {node.pid} on {node.base_url} (log {node.log_path}); databases {prefix}_00..31")
            async with ClientSession() as session:
                app_id, _ = await create_app(session, node.base_url, node.admin_key)
            async with SinkProcess(SinkConfig()) as sink:
                callback = CallbackSpec((sink.callback_url,), timeout_ms=3000)
                started = now_ms()
                moved_shards = list(topology.shards_of_database(args.db))
                parked_ids = mint_ids(
                    [moved_shards[n % len(moved_shards)] for n in range(args.tasks)], started - 86_400_000
                )
                far = started + PARKED_DUE_IN_MS
                parked = [one_shot(task_id, app_id, far + n % 3_600_000, callback, started)
                          for n, task_id in enumerate(parked_ids)]  # fmt: skip
                say(f"seeding {args.tasks:,} parked tasks into logical database {args.db}")
                clock = time.perf_counter()
                await asyncio.to_thread(seed, layout, parked)
                parked_s = time.perf_counter() - clock
                parked_rate = args.tasks / parked_s if parked_s > 0 else math.inf
                say(f"seeded {args.tasks:,} in {parked_s:.1f} s ({parked_rate:,.0f} rows/s)")
                del parked, parked_ids

                due_count = round(args.rate * args.window_s)
                # due rows go in at about a third of the parked rate (a few rows per table a statement)
                # all in before the load of the window's first cycle (up to a cycle and the load lead ahead)
                lead_s = due_count / min(parked_rate / 3, 20_000) + args.cycle_s + args.load_lead_s + 15
                window_start = now_ms() + round(lead_s * 1000)
                window_end = window_start + round(args.window_s * 1000)
                rng = random.Random(7)
                all_shards = list(topology.shards())
                due_ids = mint_ids([rng.choice(all_shards) for _ in range(due_count)], started - 2 * 86_400_000)
                instants = [window_start + math.floor(n * 1000 / args.rate) for n in range(due_count)]
                registered = dict(zip(due_ids, instants, strict=True))
                due = [one_shot(task_id, app_id, at, callback, started) for task_id, at in registered.items()]
                say(f"seeding {due_count:,} due tasks ({args.rate:g}/s over {args.window_s:g} s, all shards)")
                clock = time.perf_counter()
                await asyncio.to_thread(seed, layout, due)
                due_s = time.perf_counter() - clock
                del due
                seeded_ms = now_ms()
                say(f"seeded in {due_s:.1f} s; the window starts in {(window_start - seeded_ms) / 1000:.0f} s")
                if seeded_ms > window_start - (args.cycle_s + args.load_lead_s) * 1000:
                    warnings.append("the due tasks were seeded after their first cycle's load began: early ones late")

                move_at = window_start + round(args.move_at_s * 1000)
                await _sleep_until(move_at)
                loads["move_start"] = load_average()
                pids = {"node": node.pid, **server_pids, **({"sink": sink.pid} if sink.pid else {})}
                cpu_before = {name: process_cpu_s(pid) for name, pid in pids.items()}
                children_before = resource.getrusage(resource.RUSAGE_CHILDREN)
                command = [sys.executable, "-m", "tjobs.cli.main", "shards", "move", "--db", str(args.db),
                           "--to", target, "--config", str(node.config_path), "--batch-rows", str(args.batch_rows),
                           "--cut-over-below", str(args.cut_over_below)]  # fmt: skip
                if args.copy_duty is not None:
                    command += ["--copy-duty", str(args.copy_duty)]
                if args.max_rows_per_s is not None:
                    command += ["--max-rows-per-s", str(args.max_rows_per_s)]
                if args.profile_mover:  # py-spy's collapsed stacks of the mover (its CPU, by function)
                    command = ["py-spy", "record", "--format", "raw", "-r", "200", "-o", args.profile_mover,
                               "--", *command]  # fmt: skip
                say(f"moving logical database {args.db} to {target}")
                move = await run_mover(command)
                loads["move_end"] = load_average()
                cpu_after = {name: process_cpu_s(pid) for name, pid in pids.items()}
                children_after = resource.getrusage(resource.RUSAGE_CHILDREN)  # the mover, reaped meanwhile
                cpu_during_move = {
                    name: round(after - before, 1)
                    for name, after in cpu_after.items()
                    if after is not None and (before := cpu_before[name]) is not None
                }
                cpu_during_move["mover"] = round(
                    children_after.ru_utime
                    + children_after.ru_stime
                    - children_before.ru_utime
                    - children_before.ru_stime,
                    1,
                )
                say(f"mover exited {move.returncode} after {(move.ended_ms - move.started_ms) / 1000:.1f} s")
                if move.returncode != 0:
                    warnings.append(f"the mover exited with {move.returncode}: {move.lines[-3:]}")
                record = await asyncio.to_thread(read_move, urls[0], layout.databases[0].name, args.db)
                if move.ended_ms > window_end:
                    warnings.append("the move outlasted the window: the fires during its end were not measured")

                records = await drain(sink, len(registered), window_end, args.drain_timeout_s, loads)
    finally:
        if not args.keep:
            drop_databases(storage)

    finished_ms = (record or {}).get("finished_at_ms") or move.ended_ms
    phases = Phases(
        window_start_ms=window_start,
        window_end_ms=window_end,
        move_start_ms=move.started_ms,
        move_end_ms=int(finished_ms),
        cut_over_start_ms=move.first(": cutting_over"),
        cut_over_end_ms=move.first("cut over:"),
    )
    moved_db = args.db
    on_source = {d.index for d in layout.databases if d.engine_url == layout.databases[0].engine_url} - {moved_db}

    def other_on_source(task_id: int) -> bool:
        return database_of(task_id, topology) in on_source

    def other_on_target(task_id: int) -> bool:
        return database_of(task_id, topology) not in on_source | {moved_db}

    groups = account_groups(
        registered,
        records,
        {
            "moved": lambda task_id: database_of(task_id, topology) == moved_db,
            "others": lambda task_id: database_of(task_id, topology) != moved_db,
            "others_on_source_server": other_on_source,
            "others_on_target_server": other_on_target,
        },
        phases,
    )
    copying_ms, catching_ms = move.first(": copying"), move.first(": catching_up")
    steps = {
        "copy_s": _seconds(copying_ms, catching_ms),
        "catch_up_s": _seconds(catching_ms, phases.cut_over_start_ms),
        "cut_over_s": _seconds(phases.cut_over_start_ms, phases.cut_over_end_ms),
    }
    return {
        "bench": "shard_move",
        "tasks_in_moved_database": args.tasks,
        "moved_database": args.db,
        "rate_per_s": args.rate,
        "window_s": args.window_s,
        "move_at_s": args.move_at_s,
        "seeding": {
            "parked_s": round(parked_s, 1),
            "parked_rows_per_s": round(parked_rate),
            "due_tasks": due_count,
            "due_s": round(due_s, 1),
            "due_rows_per_s": round(due_count / due_s) if due_s > 0 else None,
        },
        "move": {
            "returncode": move.returncode,
            "total_s": round((move.ended_ms - move.started_ms) / 1000, 1),
            "record_total_s": _seconds((record or {}).get("started_at_ms"), (record or {}).get("finished_at_ms")),
            **steps,
            "cut_over_pause_s": (
                round(record["cut_over_pause_ms"] / 1000, 3)
                if record and record["cut_over_pause_ms"] is not None
                else None
            ),
            "rows_copied": record["rows_copied"] if record else None,
            "record": record,
            "cpu_s_during_move": cpu_during_move,
            "output_tail": [line for _, line in move.lines[-4:]],
        },
        "fires": groups,
        "load": loads,
        "settings": {
            "batch_rows": args.batch_rows,
            "cut_over_below": args.cut_over_below,
            "copy_duty": args.copy_duty,  # None: the mover's default
            "max_rows_per_s": args.max_rows_per_s,
            "node": {**NODE_SETTINGS, "scheduler": {"cycle_s": args.cycle_s, "load_lead_s": args.load_lead_s}},
        },
        "warnings": warnings,
        "machine": machine(),
    }


def _seconds(start_ms: int | None, end_ms: int | None) -> float | None:
    return None if start_ms is None or end_ms is None else round((end_ms - start_ms) / 1000, 2)


async def _sleep_until(at_ms: int) -> None:
    wait_s = (at_ms - now_ms()) / 1000
    if wait_s > 0:
        await asyncio.sleep(wait_s)


def run(args: argparse.Namespace) -> dict[str, Any]:
    with contextlib.ExitStack() as stack:
        root = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="tjobs-move-bench-", dir=args.data_dir)))
        urls: list[str] = []
        server_pids: dict[str, int] = {}
        if args.source_url:
            urls.append(args.source_url)
        for index in range(2 - len(urls)):
            directory = root / f"mariadb{index + 1}"
            directory.mkdir()
            url, pid = stack.enter_context(bench_mariadb(directory, args.buffer_pool, args.redo_log))
            urls.append(url)
            server_pids["source_server" if len(urls) == 1 else "target_server"] = pid
        say(f"servers: {', '.join(url.split('@', 1)[1] for url in urls)}")
        return asyncio.run(bench(args, urls, server_pids))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks shard_move", description=(__doc__ or "").splitlines()[0]
    )
    parser.add_argument("--tasks", type=int, default=100_000, help="parked tasks in the moved database")
    parser.add_argument("--rate", type=float, default=500.0, help="due one-shot fires per second, all shards")
    parser.add_argument("--window-s", type=float, default=120.0, help="how long the due tasks come due")
    parser.add_argument("--move-at-s", type=float, default=20.0, help="start the move this far into the window")
    parser.add_argument("--db", type=int, default=1, help="the logical database moved (1..3)")
    parser.add_argument("--batch-rows", type=int, default=1000, help="the mover's --batch-rows")
    parser.add_argument("--cut-over-below", type=int, default=200, help="the mover's --cut-over-below")
    parser.add_argument("--copy-duty", type=float, help="the mover's --copy-duty (default: the mover's default)")
    parser.add_argument("--max-rows-per-s", type=int, help="the mover's --max-rows-per-s (default: none)")
    parser.add_argument("--profile-mover", help="run the mover under py-spy, its collapsed stacks to this file")
    parser.add_argument("--drain-timeout-s", type=float, default=60.0)
    parser.add_argument("--cycle-s", type=int, default=10, help="the node's scheduler.cycle_s")
    parser.add_argument("--load-lead-s", type=int, default=5, help="the node's scheduler.load_lead_s")
    parser.add_argument("--buffer-pool", default="1G", help="innodb_buffer_pool_size of the bench's servers")
    parser.add_argument(
        "--redo-log", default="1G", help="innodb_log_file_size of the bench's servers (MariaDB's default: 96M)"
    )
    parser.add_argument("--source-url", help="a running MariaDB as the source server (default: one of our own)")
    parser.add_argument("--data-dir", help="where the bench's servers keep their data (default: the temp dir)")
    parser.add_argument("--keep", action="store_true", help="keep the databases afterwards")
    parser.add_argument("--node-dir", help="the node's work directory, kept afterwards (its log, node.log)")
    args = parser.parse_args(argv)
    print(json.dumps(run(args)))


if __name__ == "__main__":
    main()
