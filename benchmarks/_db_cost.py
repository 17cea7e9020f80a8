"""What MariaDB spent between two readings: the server process's CPU (``/proc``) and ``SHOW GLOBAL STATUS``
counters (statements and their kinds, redo bytes, handler and InnoDB row work, table-cache churn, reads,
flushes and fsyncs). Shared by the benches that give a per-operation database cost
(:mod:`benchmarks.run_reports`, ``python -m benchmarks fire``). The server is found through ``@@pid_file`` on
the bench's storage URL; every client of that server counts, so a server other work shares inflates every
figure (:func:`per_op_net_of_quiet` takes off a quiet rate measured beside the window). A counter the server
does not have is left out of the deltas and named in ``absent``. Each reading's own ``SHOW GLOBAL STATUS``
is one statement (taken off ``Questions``); the server may count a temporary table and handler writes for it
too (not taken off: one reading, against the thousands of operations between two)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

import pymysql
from sqlalchemy.engine import make_url

from testkit.node_process import process_cpu_s

COUNTERS = (
    "Questions",
    "Com_select",
    "Com_insert",
    "Com_update",
    "Com_delete",
    "Com_commit",
    "Innodb_os_log_written",
    # index work and row changes
    "Handler_write",
    "Handler_update",
    "Handler_delete",
    "Handler_read_key",
    "Innodb_rows_inserted",
    "Innodb_rows_updated",
    "Innodb_rows_deleted",
    # table-cache churn, reads from disk, flushes and fsyncs, temporary tables
    "Opened_tables",
    "Table_open_cache_misses",
    "Table_open_cache_overflows",
    "Innodb_buffer_pool_reads",
    "Innodb_buffer_pool_pages_flushed",
    "Innodb_data_fsyncs",
    "Created_tmp_tables",
)
OWN_STATEMENTS = 1  # the reading's own SHOW GLOBAL STATUS counts in Questions


@dataclass(frozen=True)
class DbReading:
    cpu_s: float | None  # the server process's user + system CPU; None where /proc cannot be read
    counters: dict[str, int]


class DbReader(Protocol):
    """What takes a reading: :class:`DbProbe`, or a test's stand-in."""

    def read(self) -> DbReading: ...


class DbProbe:
    """Readings of one MariaDB server, over one connection of its own (autocommit)."""

    def __init__(self, url: str, pid: int | None = None) -> None:
        server = make_url(url)
        self._connection: pymysql.Connection[Any] = pymysql.connect(
            host=server.host,
            port=server.port or 3306,
            user=server.username or "root",
            password=server.password or "",
            autocommit=True,
        )
        self.pid = pid if pid is not None else self._server_pid()

    def _server_pid(self) -> int | None:
        with self._connection.cursor() as cursor:
            cursor.execute("SELECT @@pid_file")
            row = cursor.fetchone()
        try:
            with open(str(row[0]) if row else "") as pid_file:
                return int(pid_file.read().strip())
        except (OSError, ValueError):
            return None

    def read(self) -> DbReading:
        cpu_s = process_cpu_s(self.pid) if self.pid is not None else None
        with self._connection.cursor() as cursor:
            cursor.execute(
                "SHOW GLOBAL STATUS WHERE Variable_name IN (" + ",".join(["%s"] * len(COUNTERS)) + ")", COUNTERS
            )
            counters = {str(name): int(value) for name, value in cursor.fetchall()}
        return DbReading(cpu_s, counters)

    def close(self) -> None:
        self._connection.close()


def deltas(before: DbReading, after: DbReading) -> tuple[dict[str, int], list[str]]:
    """Each counter's change between two readings (``Questions`` less the later reading's own statement),
    and the counters of :data:`COUNTERS` missing from either reading (the server has no such counter)."""
    present = [name for name in COUNTERS if name in before.counters and name in after.counters]
    delta = {name: after.counters[name] - before.counters[name] for name in present}
    if "Questions" in delta:
        delta["Questions"] -= OWN_STATEMENTS
    return delta, [name for name in COUNTERS if name not in delta]


def _cpu_s(before: DbReading, after: DbReading) -> float | None:
    return None if before.cpu_s is None or after.cpu_s is None else after.cpu_s - before.cpu_s


def db_cost(before: DbReading, after: DbReading, per: int) -> dict[str, Any]:
    """The server's CPU (µs) and statements per operation between two readings, ``per`` operations."""
    if per <= 0:
        return {}
    delta, absent = deltas(before, after)
    cpu_s = _cpu_s(before, after)
    questions = delta.get("Questions")
    return {
        "cpu_us_per_op": None if cpu_s is None else round(cpu_s * 1e6 / per, 1),
        "statements_per_op": None if questions is None else round(questions / per, 3),
        "per_op": {name: round(value / per, 3) for name, value in delta.items() if name != "Questions"},
        "totals": delta,
        "absent": absent,
    }


Span = tuple[DbReading, DbReading, float]
"""Two readings and the seconds between them (a monotonic clock's)."""


def per_op_net_of_quiet(window: Span, ops: int, quiet: Span | None) -> dict[str, Any] | None:
    """Per operation over ``window`` (``ops`` operations), gross and net of ``quiet``: the server's CPU
    (``mariadb_cpu_us``), statements (``statements``) and every other counter (``counters``). Net is the
    window's change less the quiet span's rate over the window's length (None without a quiet span; only
    the counters both spans have); ``quiet`` gives that rate: the server's cores, statements and counters
    per second. A counter absent from the window's readings is left out and named in ``absent``. None
    with no operation."""
    if ops <= 0:
        return None
    before, after, seconds = window
    delta, absent = deltas(before, after)
    cpu_s = _cpu_s(before, after)
    result: dict[str, Any] = {
        "ops": ops,
        "seconds": round(seconds, 3),
        "gross": _per_op(cpu_s, delta, ops),
        "quiet": None,
        "net": None,
        "absent": absent,
    }
    if quiet is None or quiet[2] <= 0:
        return result
    quiet_before, quiet_after, quiet_s = quiet
    quiet_delta, _ = deltas(quiet_before, quiet_after)
    quiet_cpu_s = _cpu_s(quiet_before, quiet_after)
    rate = {name: quiet_delta[name] / quiet_s for name in delta if name in quiet_delta}
    cpu_rate = None if quiet_cpu_s is None else quiet_cpu_s / quiet_s
    result["quiet"] = {
        "seconds": round(quiet_s, 3),
        "mariadb_cores": None if cpu_rate is None else round(cpu_rate, 4),
        "statements_per_s": None if "Questions" not in rate else round(rate["Questions"], 2),
        "counters_per_s": {name: round(value, 2) for name, value in rate.items() if name != "Questions"},
    }
    net_cpu_s = None if cpu_s is None or cpu_rate is None else cpu_s - cpu_rate * seconds
    net = {name: delta[name] - rate[name] * seconds for name in rate}
    result["net"] = _per_op(net_cpu_s, net, ops)
    return result


def _per_op(cpu_s: float | None, delta: Mapping[str, float], ops: int) -> dict[str, Any]:
    questions = delta.get("Questions")
    return {
        "mariadb_cpu_us": None if cpu_s is None else round(cpu_s * 1e6 / ops, 1),
        "statements": None if questions is None else round(questions / ops, 3),
        "counters": {name: round(value / ops, 3) for name, value in delta.items() if name != "Questions"},
    }
