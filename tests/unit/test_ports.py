"""The ports tests give their servers come from below the ephemeral range, where no outgoing connection
can take one between the probe and the server's bind (a chaos node failed with "address already in use"
on a port the kernel had handed out), and are not handed out twice in turn."""

from __future__ import annotations

from pathlib import Path

from testkit.ports import free_port, free_port_range


def test_ports_are_below_the_ephemeral_range_and_not_repeated() -> None:
    ephemeral_low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    ports = [free_port() for _ in range(200)]
    assert max(ports) < ephemeral_low
    assert len(set(ports)) == len(ports)
    first = free_port_range(3)
    assert first + 2 < ephemeral_low and first not in ports
