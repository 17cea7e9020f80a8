"""The soak's cluster: the fault suite's rig (3 node processes, 2 MariaDB servers, etcd, Redis from
``scripts/cluster.sh infra``) with every node reaching database server 1 through a TCP proxy (so one
node's path to it can be cut; the proxy runs in a process of its own, :class:`ProxyProcess`, so its
pumping never takes the driver's GIL from the receivers) and nodes 2 and 3 under libfaketime with a
timestamp file each (so their wall clock can be stepped; their monotonic clock is left alone, as
``date -s`` leaves it).

Node 1 serves the workload's API calls and is never a victim.
"""

from __future__ import annotations

import contextlib
import secrets
import signal
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sqlalchemy.engine import make_url

from testkit.cluster_rig import Api, ClusterRig, Infra
from testkit.tcp_proxy import ProxyProcess, proxy_url

NODES = 3
CUT_SERVER = 1  # the second MariaDB server (the first holds the apps table)
VICTIMS = (2, 3)


def libfaketime() -> Path:
    found = sorted(Path("/usr/lib").glob("*/faketime/libfaketime.so.1"))
    if not found:
        raise RuntimeError(
            "libfaketime is not installed: scripts/services.sh up installs it (apt-get install libfaketime)"
        )
    return found[0]


def port_of(url: str) -> int:
    port = make_url(url).port
    if port is None:
        raise ValueError(f"no port in {url}")
    return port


@dataclass
class SoakCluster:
    infra: Infra
    work_dir: Path
    proxy: ProxyProcess
    overrides: Mapping[str, Any] = field(default_factory=dict)
    rig: ClusterRig = field(init=False)
    clock_files: dict[int, Path] = field(default_factory=dict)

    def __post_init__(self) -> None:
        urls = list(self.infra.storage_urls)
        urls[CUT_SERVER] = proxy_url(urls[CUT_SERVER], self.proxy)
        storage = {"storage": {"urls": urls}}
        prefix = f"tjsk_{secrets.token_hex(3)}"
        self.rig = ClusterRig(
            self.infra, self.work_dir, f"s{secrets.token_hex(4)}", prefix, overrides={**self.overrides, **storage}
        )
        if "storage" in self.overrides:
            raise ValueError("the soak sets the storage URLs itself")
        for index in VICTIMS:
            path = self.work_dir / f"node{index}.faketime"
            path.write_text("+0s\n")
            self.clock_files[index] = path

    def ports(self) -> dict[str, frozenset[int]]:
        """The remote ports a node's connections lead to, by service (server 1: the proxy's)."""
        return {
            "db": frozenset({port_of(self.infra.storage_urls[0]), self.proxy.port}),
            "etcd": frozenset({port_of(self.infra.etcd_url)}),
            "redis": frozenset({port_of(self.infra.redis_url)}),
        }

    def env(self, index: int) -> dict[str, str] | None:
        if index not in self.clock_files:
            return None
        return {
            "LD_PRELOAD": str(libfaketime()),
            "FAKETIME_TIMESTAMP_FILE": str(self.clock_files[index]),
            "FAKETIME_CACHE_DURATION": "1",  # the file is read again at most once a second
            "FAKETIME_DONT_FAKE_MONOTONIC": "1",
            "FAKETIME_DONT_RESET": "1",
        }

    def start(self, index: int) -> None:
        """Start (or restart) node ``index`` and name it at the proxy."""
        node = self.rig.start(index, env=self.env(index))
        clients = {pid: name for pid, name in self.proxy.clients.items() if name != node.node_id}
        self.proxy.set_clients({**clients, node.pid: node.node_id})

    def step_clock(self, index: int, offset_s: float) -> None:
        """Node ``index``'s wall clock is ``offset_s`` off from now on (within about a second)."""
        self.clock_files[index].write_text(f"{offset_s:+g}s\n")

    async def start_all(self, api: Api) -> None:
        for index in range(1, NODES + 1):
            self.start(index)
        for node in self.rig.live():
            await api.wait_healthy(node)
        await api.wait_stable(NODES)

    def pid(self, index: int) -> int | None:
        node = self.rig.nodes.get(index)
        return node.pid if node is not None and node.alive() else None

    def heal(self) -> None:
        """Undo every fault: clocks back, the proxy passing for everyone, every node resumed."""
        for index in self.clock_files:
            self.step_clock(index, 0)
        for index in range(1, NODES + 1):
            with contextlib.suppress(RuntimeError, OSError):  # a proxy process that ended cuts no one
                self.proxy.set_mode("pass", f"node{index}")
            if index in self.rig.nodes:
                self.rig.signal(index, signal.SIGCONT)
