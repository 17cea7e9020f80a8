"""The nemesis soak's sampler (tests/chaos/soak/sampler.py) reads a process's memory, descriptors and
established connections by remote port from /proc: here, of this test's own process."""

from __future__ import annotations

import os
import socket
import sys
import time

import pytest

from tests.chaos.soak import sampler
from tests.chaos.soak.sampler import cpu_s, sample_node

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")


def test_a_live_process_is_sampled_with_its_connections_counted_by_the_port_they_lead_to() -> None:
    with socket.create_server(("127.0.0.1", 0)) as server:
        port = server.getsockname()[1]
        with socket.create_connection(("127.0.0.1", port)) as client:
            accepted, _ = server.accept()
            with accepted:
                taken = sample_node(1, os.getpid(), 123, {"db": frozenset({port}), "etcd": frozenset({1})})
    assert (taken.node, taken.pid, taken.at_ms, taken.state) == (1, os.getpid(), 123, "running")
    assert taken.rss_kb > 0 and taken.fds >= 3
    assert taken.db_connections == 1  # the client end leads to the port; the accepted end leads back
    assert taken.etcd_connections == 0 and taken.redis_connections == 0
    assert client.fileno() == -1


def test_a_node_without_a_process_is_down() -> None:
    assert sample_node(2, None, 5, {}).state == "down"
    assert sample_node(2, 2**22 + 12345, 5, {}).state == "down"  # above pid_max's default: no such process


def test_a_process_cpu_time_is_its_user_and_system_time() -> None:
    deadline = time.process_time() + 0.05
    while time.process_time() < deadline:  # some CPU time to read
        pass
    before = sum(os.times()[:2])
    read = cpu_s(os.getpid())
    after = sum(os.times()[:2])
    assert read is not None and before - 0.02 <= read <= after + 0.02  # clock ticks (10 ms) against os.times
    assert cpu_s(2**22 + 12345) is None


def test_the_tcp_table_is_read_once_a_round_and_not_for_a_process_whose_connections_are_not_counted(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """/proc/net/tcp lists every socket of the machine (~10k in a soak): the soak reads it once per
    sampling round for the three nodes, and not at all for its own process."""
    reads: list[int] = []
    real = sampler.remote_ports_by_inode

    def counted() -> dict[str, int]:
        reads.append(1)
        return real()

    monkeypatch.setattr(sampler, "remote_ports_by_inode", counted)
    assert sample_node(0, os.getpid(), 1, {}).fds >= 3
    assert reads == []
    remote = sampler.remote_ports_by_inode()
    for node in (1, 2, 3):
        sample_node(node, os.getpid(), 1, {"db": frozenset({1})}, remote)
    assert reads == [1]
