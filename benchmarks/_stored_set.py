"""A stored set for a bench: many tasks and flows written straight into the shard tables before it
measures, so the fire path meets tables (and a buffer pool) of a deployment's size. Shared by
:mod:`benchmarks.online_migration` (parked tasks) and :mod:`benchmarks.cycle_load_tail` (parked tasks
and delivered flows).

- Parked tasks: one-shot tasks due in the hour after ``far_ms`` (never loaded by a run's cycle loads),
  built from one template row (only id, name and instant vary).
- Delivered flows: the row a fire inserts and its outcome's ``UPDATE`` leave after one delivered
  attempt (:func:`benchmarks.capacity.delivered_flow`: attempt history and kept answer), each of a task
  of its own (a fired one-shot; the task rows themselves are not written), instants spread evenly over
  a span in the past, each shard's in id and instant order (as fires append them).

Both are written every shard evenly, ``INSERT_ROWS`` rows a multi-row ``INSERT``, by ``workers``
connections, each its share of the shard tables (blocking: run them in a thread). :func:`stored_sizes`
reads the server's buffer pool and the task and flow tables' data and index bytes afterwards.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from benchmarks.capacity import delivered_flow
from benchmarks.shard_move import INSERT_ROWS, _connect, mint_ids, now_ms
from tjobs.model import Task
from tjobs.specs import AtSpec, schedule_to_text
from tjobs.stores.schema import TASK_COLUMNS
from tjobs.stores.sql_layout import Layout, ShardTables

DAY_MS = 86_400_000
_ID, _NAME, _NEXT_RUN, _SCHEDULE = (TASK_COLUMNS.index(c) for c in ("id", "name", "next_run_at", "schedule"))
# the columns a delivered flow's row sets (the rest keep their defaults, as after a fire and its outcome)
FLOW_ROW_COLUMNS: tuple[str, ...] = (
    "task_id", "scheduled_at", "app_id", "kind", "status", "attempts", "next_attempt_at", "missed",
    "last_status_code", "last_error", "created_at", "updated_at", "attempt_log", "answers",
)  # fmt: skip


# ---- the rows (pure) -------------------------------------------------------------------------------


def parked_rows(template: Sequence[Any], ids: Sequence[int], far_ms: int) -> list[Any]:
    """The flattened values of one parked row per id: ``template``'s, with the id, a name of its own and
    an instant in the hour after ``far_ms`` (its ``at`` schedule to match)."""
    values: list[Any] = []
    for n, task_id in enumerate(ids):
        at_ms = far_ms + (n % 3600) * 1000
        row = list(template)
        row[_ID], row[_NAME], row[_NEXT_RUN], row[_SCHEDULE] = task_id, f"parked-{task_id}", at_ms, _at_text(at_ms)
        values += row
    return values


@functools.cache
def _at_text(at_ms: int) -> str:
    return schedule_to_text(AtSpec(at_ms))


def flow_instants(count: int, from_ms: int, until_ms: int) -> list[int]:
    """``count`` instants spread evenly over ``[from_ms, until_ms)``, ascending."""
    span = until_ms - from_ms
    return [from_ms + n * span // count for n in range(count)]


def flow_rows(task: Task, ids: Sequence[int], instants: Sequence[int]) -> list[Any]:
    """The flattened values (:data:`FLOW_ROW_COLUMNS`) of one delivered flow per id, of a task like
    ``task`` (its app and callback) with that id, scheduled at the matching instant."""
    values: list[Any] = []
    for task_id, at_ms in zip(ids, instants, strict=True):
        row = delivered_flow(task, at_ms)
        row["task_id"] = task_id
        values += [row[column] for column in FLOW_ROW_COLUMNS]
    return values


def shares(count: int, shards: int) -> list[int]:
    """``count`` rows over ``shards`` shards, evenly (the first ``count % shards`` one more)."""
    return [count // shards + (1 if n < count % shards else 0) for n in range(shards)]


# ---- the writes (blocking) -------------------------------------------------------------------------


def _fill(
    layout: Layout,
    count: int,
    workers: int,
    table_of: Callable[[ShardTables], str],
    columns: Sequence[str],
    values_of: Callable[[int, Sequence[int], int], list[Any]],
    base_ms: int,
) -> None:
    """Write ``count`` rows, every shard evenly: shard ``s``'s ids minted for it at ``base_ms``, each
    statement's values from ``values_of(shard, ids, index of the first in the shard)``."""
    shards = list(range(len(layout.shards)))
    per_shard = shares(count, len(shards))
    names = ", ".join(f"`{column}`" for column in columns)
    row_sql = "(" + ", ".join(["%s"] * len(columns)) + ")"

    def fill(share: Sequence[int]) -> None:
        connections: dict[str, Any] = {}
        try:
            for shard in share:
                home = layout.shards[shard]
                url = home.database.engine_url
                connection = connections.get(url) or connections.setdefault(url, _connect(url))
                ids = mint_ids([shard] * per_shard[shard], base_ms)
                with connection.cursor() as cursor:
                    for start in range(0, len(ids), INSERT_ROWS):
                        chunk = ids[start : start + INSERT_ROWS]
                        sql = f"INSERT INTO {table_of(home)} ({names}) VALUES " + ", ".join([row_sql] * len(chunk))
                        cursor.execute(sql, values_of(shard, chunk, start))
        finally:
            for connection in connections.values():
                connection.close()

    with ThreadPoolExecutor(max_workers=workers) as pool:
        list(pool.map(fill, [shards[n::workers] for n in range(workers)]))


def load_parked(layout: Layout, template: Sequence[Any], count: int, far_ms: int, workers: int) -> None:
    """Write ``count`` parked tasks (:func:`parked_rows`), ids minted a day in the past (where the
    node's own ids never go)."""
    _fill(
        layout, count, workers, lambda home: home.tasks_sql, TASK_COLUMNS,
        lambda _shard, ids, _start: parked_rows(template, ids, far_ms), now_ms() - DAY_MS,
    )  # fmt: skip


def load_flows(layout: Layout, task: Task, count: int, from_ms: int, until_ms: int, workers: int) -> None:
    """Write ``count`` delivered flows (:func:`flow_rows`), each shard's instants spread over
    ``[from_ms, until_ms)``; task ids minted three days in the past (apart from :func:`load_parked`'s and
    the benches' due tasks')."""
    per_shard = shares(count, len(layout.shards))
    instants = [flow_instants(n, from_ms, until_ms) for n in sorted(set(per_shard))]
    by_count = {len(found): found for found in instants}

    def values_of(shard: int, ids: Sequence[int], start: int) -> list[Any]:
        return flow_rows(task, ids, by_count[per_shard[shard]][start : start + len(ids)])

    _fill(layout, count, workers, lambda home: home.flows_sql, FLOW_ROW_COLUMNS, values_of, now_ms() - 3 * DAY_MS)


def stored_sizes(layout: Layout) -> dict[str, Any]:
    """The server's ``innodb_buffer_pool_size`` and, under ``bytes``, the task and flow tables' data and
    index bytes (``information_schema.TABLES`` after ``ANALYZE TABLE`` on each: tjobs tables keep no automatic
    statistics, so the figures are stale otherwise). One server (the first shard's)."""
    url = layout.shards[0].database.engine_url
    connection = _connect(url)
    sizes: dict[str, dict[str, int]] = {"tasks": {"data_bytes": 0, "index_bytes": 0},
                                        "flows": {"data_bytes": 0, "index_bytes": 0}}  # fmt: skip
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT @@innodb_buffer_pool_size")
            pool = int(cursor.fetchone()[0])
            for home in layout.shards:
                if home.database.engine_url != url:
                    raise ValueError("stored_sizes reads one server")
                for kind, table in (("tasks", home.tasks), ("flows", home.flows)):
                    cursor.execute(f"ANALYZE TABLE `{home.database.name}`.`{table.name}`")
                    cursor.fetchall()
                    cursor.execute(
                        "SELECT data_length, index_length FROM information_schema.TABLES"
                        " WHERE table_schema = %s AND table_name = %s",
                        (home.database.name, table.name),
                    )
                    data, index = cursor.fetchone()
                    sizes[kind]["data_bytes"] += int(data)
                    sizes[kind]["index_bytes"] += int(index)
    finally:
        connection.close()
    return {"innodb_buffer_pool_size": pool, "bytes": sizes}
