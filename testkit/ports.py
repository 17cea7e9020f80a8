"""Loopback ports for the servers a test or a bench starts (a node's API, a broker, an own MariaDB).

A port the kernel hands out for ``bind(0)`` comes from the ephemeral range, which every outgoing
connection on the machine draws from too: between the probe closing it and the server binding it, a
node's connection to MariaDB or etcd could take it, and the server failed with "address already in use"
(a chaos run's node2 on a clean-clone run at load 7). So the ports here come from below the ephemeral
range (10000-17999: the rigs' own servers sit in 20000-29999, scripts/test.sh), a slice of 1,000 per
pytest-xdist worker so that two workers never hand out the same one, in turn through the slice from a
random start so that a port is not handed out again until its slice has gone round.
"""

from __future__ import annotations

import os
import random
import socket
import threading

FIRST_PORT = 10_000
SLICE = 1_000
SLICES = 8  # FIRST_PORT + SLICES * SLICE stays below the rigs' block (20000)

_lock = threading.Lock()
_next: int | None = None


def _slice_start() -> int:
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw")
    return FIRST_PORT + (int(worker) if worker.isdigit() else 0) % SLICES * SLICE


def _candidates(count: int) -> int:
    """The first of ``count`` ports next in turn in this process's slice."""
    global _next
    start = _slice_start()
    with _lock:
        if _next is None:
            _next = random.randrange(SLICE)
        if _next + count > SLICE:
            _next = 0
        first = start + _next
        _next += count
        return first


def _bindable(port: int) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def free_port() -> int:
    """A loopback port outside the ephemeral range that nothing is bound to now."""
    return free_port_range(1)


def free_port_range(count: int) -> int:
    """The first of ``count`` consecutive such ports (``tjobs serve --workers``: worker i on first + i;
    etcd: client and peer)."""
    for _ in range(SLICE):
        first = _candidates(count)
        if all(_bindable(port) for port in range(first, first + count)):
            return first
    raise OSError(f"no {count} consecutive free ports in {_slice_start()}..{_slice_start() + SLICE - 1}")
