"""What the soak samples of each node process every few seconds, from ``/proc`` alone (so a node stopped
with SIGSTOP is still measured): resident memory, open file descriptors, and its established TCP
connections by the port they lead to (the database servers, etcd, Redis).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Mapping
from pathlib import Path

from tests.chaos.soak.report import Sample

ESTABLISHED = "01"


def remote_ports_by_inode() -> dict[str, int]:
    """Socket inode -> remote port of every established TCP connection on the machine."""
    found: dict[str, int] = {}
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with contextlib.suppress(OSError), open(table) as rows:
            next(rows, None)
            for row in rows:
                cols = row.split()
                if len(cols) > 9 and cols[3] == ESTABLISHED:
                    found[cols[9]] = int(cols[2].rsplit(":", 1)[1], 16)
    return found


def _rss_kb(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def _state(pid: int) -> str:
    state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    return "stopped" if state in ("T", "t") else "down" if state in ("Z", "X") else "running"


def cpu_s(pid: int) -> float | None:
    """User plus system CPU seconds process ``pid`` has used (``None``: no such process)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime, stime: fields 14, 15


def sample_node(
    node: int,
    pid: int | None,
    at_ms: int,
    ports: Mapping[str, frozenset[int]],
    remote: Mapping[str, int] | None = None,
) -> Sample:
    """One :class:`Sample` of process ``pid`` (``None`` or gone: ``down``). ``ports`` names the remote
    ports of ``db``, ``etcd`` and ``redis`` (for database server 1, its proxy's port); ``remote`` is
    :func:`remote_ports_by_inode`, read once for a round's nodes (read here when not given; not at all
    when ``ports`` counts nothing)."""
    if pid is None:
        return Sample(at_ms, node, 0, "down")
    try:
        state = _state(pid)
        rss_kb = _rss_kb(pid)
        fds = os.listdir(f"/proc/{pid}/fd")
    except (OSError, IndexError):
        return Sample(at_ms, node, pid, "down")
    links = []
    for fd in fds:
        with contextlib.suppress(OSError):  # closed since the listing
            links.append(os.readlink(f"/proc/{pid}/fd/{fd}"))
    if remote is None:
        remote = remote_ports_by_inode() if ports else {}
    counts = dict.fromkeys(ports, 0)
    for link in links:
        if link.startswith("socket:["):
            port = remote.get(link[8:-1])
            for name, wanted in ports.items():
                if port in wanted:
                    counts[name] += 1
    return Sample(
        at_ms,
        node,
        pid,
        state,
        rss_kb=rss_kb,
        fds=len(links),
        db_connections=counts.get("db", 0),
        etcd_connections=counts.get("etcd", 0),
        redis_connections=counts.get("redis", 0),
    )
