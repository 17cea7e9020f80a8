"""What MariaDB spent between two readings: the server process's CPU (``/proc``) and ``SHOW GLOBAL STATUS``
counters (statements and their kinds, redo bytes). Shared by the benches that give a per-operation database
cost (:mod:`benchmarks.run_reports`). The server is found through ``@@pid_file`` on the bench's storage URL;
every client of that server counts, so a server other work shares inflates both figures."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

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
)
OWN_STATEMENTS = 1  # the reading's own SHOW GLOBAL STATUS counts in Questions


@dataclass(frozen=True)
class DbReading:
    cpu_s: float | None  # the server process's user + system CPU; None where /proc cannot be read
    counters: dict[str, int]


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


def db_cost(before: DbReading, after: DbReading, per: int) -> dict[str, Any]:
    """The server's CPU (µs) and statements per operation between two readings, ``per`` operations."""
    if per <= 0:
        return {}
    delta = {name: after.counters.get(name, 0) - before.counters.get(name, 0) for name in COUNTERS}
    delta["Questions"] -= OWN_STATEMENTS
    cpu_us = None
    if before.cpu_s is not None and after.cpu_s is not None:
        cpu_us = round((after.cpu_s - before.cpu_s) * 1e6 / per, 1)
    return {
        "cpu_us_per_op": cpu_us,
        "statements_per_op": round(delta["Questions"] / per, 3),
        "per_op": {name: round(value / per, 3) for name, value in delta.items() if name != "Questions"},
        "totals": delta,
    }
