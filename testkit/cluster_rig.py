"""A real cluster on one machine for tests and benchmarks: services from ``scripts/cluster.sh infra``,
node processes (``python -m tjobs.cli.main serve --config FILE``) started and signalled from here.

Only processes started here (nodes) or by ``cluster.sh`` for this state directory (its MariaDB servers,
etcd and Redis, whose PIDs it records) are ever signalled. The fault helpers (:meth:`Infra.signal_service`,
:meth:`Infra.kill_service`, :meth:`Infra.flush_redis`, :meth:`ClusterRig.hold_row_locks`) are what the
fault suite (``tests/chaos``) breaks the cluster with.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx
from prometheus_client.parser import text_string_to_metric_families

from sharding import Topology
from testkit.children import REPO
from testkit.node_process import _merge, migrate_in_process, to_toml
from testkit.ports import free_port
from testkit.row_locks import lock_rows
from tjobs.clock import iso_ms

CLUSTER_SH = REPO / "scripts" / "cluster.sh"
ADMIN_KEY = "tja_rig_admin_" + "x" * 16
ADMIN_AUTH = {"Authorization": f"Bearer {ADMIN_KEY}"}
SERVICE_BINARIES = {"etcd": "etcd", "redis": "redis-server"}  # and mariadbN -> mariadbd


def _service_binary(name: str) -> str:
    return "mariadbd" if name.startswith("mariadb") else SERVICE_BINARIES[name]


def _process_state(pid: int) -> tuple[str, str] | None:
    """``(comm, state letter)`` of a live process, ``None`` when it is gone."""
    try:
        comm = Path(f"/proc/{pid}/comm").read_text().strip()
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return None
    return comm, state


@dataclass(frozen=True)
class Infra:
    state_dir: Path
    storage_urls: list[str]
    etcd_url: str
    redis_url: str
    env: dict[str, str]

    def pid(self, name: str) -> int | None:
        try:
            pid = int((self.state_dir / f"{name}.pid").read_text().strip())
            os.kill(pid, 0)
            return pid
        except (OSError, ValueError):
            return None

    def ensure(self) -> None:
        """(Re)start whatever of this state directory's services does not answer."""
        subprocess.run([str(CLUSTER_SH), "infra"], env=self.env, check=True, capture_output=True, timeout=180)

    @staticmethod
    def mariadb(server: int) -> str:
        """The service name of MariaDB server ``server`` (0-based, the index into ``storage_urls``)."""
        return f"mariadb{server + 1}"

    def service_pid(self, name: str) -> int:
        """The PID of service ``name`` (``mariadb1``, ``mariadb2``, ``etcd``, ``redis``) as recorded by
        ``cluster.sh`` in this state directory, checked to still run that binary. Raises ``RuntimeError``
        when this state directory did not start it (a server answering on the port was started by
        someone else, and is never signalled from here)."""
        pid = self.pid(name)
        found = None if pid is None else _process_state(pid)
        if pid is None or found is None or not found[0].startswith(_service_binary(name)[:15]) or found[1] == "Z":
            raise RuntimeError(
                f"{name} is not running from {self.state_dir} (its port may be served by another state "
                "directory's process, which is never signalled from here)"
            )
        return pid

    def signal_service(self, name: str, sig: signal.Signals) -> int:
        """Send ``sig`` (SIGSTOP, SIGCONT, ...) to this state directory's service ``name``; its PID."""
        pid = self.service_pid(name)
        os.kill(pid, sig)
        return pid

    def kill_service(self, name: str, timeout_s: float = 10.0) -> None:
        """SIGKILL this state directory's service ``name`` and wait until it is gone (``ensure`` restarts it)."""
        pid = self.signal_service(name, signal.SIGKILL)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            found = _process_state(pid)
            if found is None or found[1] == "Z":
                return
            time.sleep(0.05)
        raise RuntimeError(f"{name} (pid {pid}) still runs {timeout_s} s after SIGKILL")

    def flush_redis(self) -> None:
        """FLUSHALL on this state directory's Redis (the hot tier; never the truth)."""
        import redis

        client = redis.Redis.from_url(self.redis_url, socket_timeout=5.0)
        try:
            client.flushall()
        finally:
            client.close()


def start_infra(
    state_dir: Path, *, etcd_port: int = 23795, redis_port: int = 6395, mysql_ports: str = "3307 3308"
) -> Infra:
    env = {
        **os.environ,
        "TJOBS_CLUSTER_DIR": str(state_dir),
        "TJOBS_CLUSTER_ETCD_PORT": str(etcd_port),
        "TJOBS_CLUSTER_REDIS_PORT": str(redis_port),
        "TJOBS_CLUSTER_MYSQL_PORTS": mysql_ports,
    }
    done = subprocess.run([str(CLUSTER_SH), "infra"], env=env, capture_output=True, text=True, timeout=300)
    if done.returncode != 0:
        raise RuntimeError(f"scripts/cluster.sh infra failed:\n{done.stderr[-3000:]}")
    values = dict(line.split("=", 1) for line in (state_dir / "env").read_text().splitlines() if "=" in line)
    return Infra(
        state_dir,
        json.loads(values["TJOBS_CLUSTER_STORAGE_URLS"]),
        values["TJOBS_CLUSTER_ETCD_URL"],
        values["TJOBS_CLUSTER_REDIS_URL"],
        env,
    )


@dataclass
class NodeProc:
    index: int
    port: int
    config: Path
    log: Path
    process: subprocess.Popen[bytes] | None = None

    @property
    def node_id(self) -> str:
        return f"node{self.index}"

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None


@dataclass
class ClusterRig:
    infra: Infra
    work_dir: Path
    name: str
    db_prefix: str
    topology: str = "2x2x4"
    hot_tier: str = "redis"
    overrides: Mapping[str, Any] = field(default_factory=dict)
    nodes: dict[int, NodeProc] = field(default_factory=dict)

    def settings(self, index: int, port: int) -> dict[str, Any]:
        base: dict[str, Any] = {
            "node_id": f"node{index}",
            "allow_loopback_callbacks": True,
            "storage": {"urls": self.infra.storage_urls, "topology": self.topology, "database_prefix": self.db_prefix},
            "api": {"host": "127.0.0.1", "port": port, "admin_key": ADMIN_KEY},
            "rate_limits": {"enabled": False},  # the rig measures ownership and firing, not API admission
            "scheduler": {"cycle_s": 10, "load_lead_s": 3, "tick_ms": 10},
            "compensator": {"interval_s": 1.0, "grace_s": 3.0},
            "metrics": {"public": True},  # on loopback only; Api.histogram scrapes it
            "callbacks": {
                "backoff_base_ms": 200,
                "backoff_max_ms": 2000,
                "timeout_ms": 2000,
                "user_agent": f"tjobs-rig/node{index}",
            },  # a receiver can tell who sent
            "cluster": {
                "etcd_endpoints": [self.infra.etcd_url],
                "redis_url": self.infra.redis_url,
                "hot_tier": self.hot_tier,
                "name": self.name,
                "zone": "abc"[(index - 1) % 3],
                "lease_ttl_s": 5,
                "sync_interval_ms": 100,
                "hot_poll_interval_ms": 100,
            },
        }
        return _merge(base, self.overrides)

    def _write_config(self, index: int) -> NodeProc:
        node = self.nodes.get(index)
        if node is None:
            port = free_port()
            config = self.work_dir / f"node{index}.toml"
            config.write_text(to_toml(self.settings(index, port)))
            node = NodeProc(index, port, config, self.work_dir / f"node{index}.log")
            self.nodes[index] = node
        return node

    def migrate(self, tree: Path | None = None) -> None:
        """``tjobs migrate`` on the rig's databases: this checkout's, in this process; or ``tree``'s (another
        checkout of the repository, say an older release's worktree) in a subprocess on this interpreter."""
        node = self._write_config(1)
        if tree is None:
            migrate_in_process(node.config, timeout_s=600)
            return
        command = [sys.executable, "-m", "tjobs.cli.main", "migrate", "--config", str(node.config)]
        done = subprocess.run(command, cwd=tree, env=_tree_env(tree), capture_output=True, text=True, timeout=600)
        if done.returncode != 0:
            raise RuntimeError(f"tjobs migrate of {tree} failed:\n{done.stdout[-2000:]}{done.stderr[-3000:]}")

    def start(self, index: int, env: Mapping[str, str] | None = None, tree: Path | None = None) -> NodeProc:
        """Start node ``index``; ``env`` is added to this process's environment (e.g. libfaketime's
        ``LD_PRELOAD`` and ``FAKETIME`` for a node with a shifted clock). ``tree``: run that checkout's
        code (an older release's worktree) on this interpreter and its installed dependencies."""
        node = self._write_config(index)
        if tree is not None:
            env = {**_tree_env(tree), **(env or {})}
        with node.log.open("ab") as log:
            node.process = subprocess.Popen(
                [sys.executable, "-m", "tjobs.cli.main", "serve", "--config", str(node.config)],
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=tree or REPO,
                env=None if env is None else {**os.environ, **env},
            )
        return node

    def signal(self, index: int, sig: signal.Signals) -> None:
        node = self.nodes[index]
        if node.alive():
            os.kill(node.pid, sig)

    def kill(self, index: int) -> None:
        self.signal(index, signal.SIGKILL)
        process = self.nodes[index].process
        if process is not None:
            process.wait(10)

    def stop(self, index: int, timeout_s: float = 15.0) -> None:
        node = self.nodes[index]
        if node.process is None or node.process.poll() is not None:
            return
        node.process.send_signal(signal.SIGCONT)
        node.process.send_signal(signal.SIGTERM)
        try:
            node.process.wait(timeout_s)
        except subprocess.TimeoutExpired:
            node.process.kill()
            node.process.wait()

    def stop_all(self, timeout_s: float = 15.0) -> None:
        """SIGTERM every live node at once (each resumed first), then wait for each; one still running
        ``timeout_s`` after the signals is killed. Stopping them one by one would have each stop's
        hand-off move the jobs to the nodes about to stop next."""
        running = [n.process for n in self.nodes.values() if n.process is not None and n.process.poll() is None]
        for process in running:
            process.send_signal(signal.SIGCONT)
            process.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + timeout_s
        for process in running:
            try:
                process.wait(max(deadline - time.monotonic(), 0.0))
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()

    def live(self) -> list[NodeProc]:
        return [n for n in self.nodes.values() if n.alive()]

    def server_of_shard(self, shard: int) -> int:
        """The MariaDB server (index into ``storage_urls``) holding ``shard``: instance i uses
        ``urls[i % len(urls)]``."""
        return Topology.parse(self.topology).locate(shard).instance % len(self.infra.storage_urls)

    def shards_of_server(self, server: int) -> list[int]:
        return [s for s in Topology.parse(self.topology).shards() if self.server_of_shard(s) == server]

    def hold_row_locks(
        self, server: int, app_id: str, hold_s: float, on_locked: Callable[[int], None] | None = None
    ) -> int:
        """On MariaDB server ``server``: ``BEGIN; SELECT ... FOR UPDATE`` of every task row of ``app_id`` in
        the shards it holds, ``DO SLEEP(hold_s)``, ``ROLLBACK`` (the locks taken again after a deadlock or a
        lock-wait timeout: :func:`testkit.row_locks.lock_rows`). Blocks (run it in a thread); calls
        ``on_locked(rows)`` once the rows are held and returns the number of rows. Any fire transaction
        touching those rows waits on the locks meanwhile."""
        import pymysql
        from sqlalchemy.engine import make_url

        url = make_url(self.infra.storage_urls[server])
        topology = Topology.parse(self.topology)
        connection = pymysql.connect(
            host=url.host,
            port=url.port or 3306,
            user=url.username or "root",
            password=url.password or "",
            autocommit=False,
        )
        statements = []
        for shard in self.shards_of_server(server):
            where = topology.locate(shard)
            table = f"`{self.db_prefix}_{where.database_index:02d}`.`{where.tasks_table}`"
            statements.append((f"SELECT id FROM {table} WHERE app_id = %s FOR UPDATE", (app_id,)))
        try:
            held = lock_rows(connection, statements)  # begins again after a deadlock or a lock-wait timeout
            if on_locked is not None:
                on_locked(held)
            with connection.cursor() as cursor:
                cursor.execute("DO SLEEP(%s)", (hold_s,))
            connection.rollback()
            return held
        finally:
            connection.close()

    def warnings(self, index: int, lines: int = 80) -> str:
        """The last ``lines`` lines of node ``index``'s log at WARNING or above, and its group moves."""
        try:
            text = self.nodes[index].log.read_text(errors="replace")
        except OSError:
            return ""
        keep = [
            line
            for line in text.splitlines()
            if any(word in line for word in ("group", "jobs", "plan", "lease", "resumed"))
            or (
                "answered 503" not in line  # a create refused on the unreachable server, as expected
                and any(mark in line[:30] for mark in ("WARNING", "ERROR", "CRITICAL"))
            )
        ]
        return "\n".join(keep[-lines:])

    def tail(self, index: int, lines: int = 40) -> str:
        try:
            return "\n".join(self.nodes[index].log.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""


def _tree_env(tree: Path) -> dict[str, str]:
    """The environment that imports ``tree``'s packages ahead of this checkout's editable install."""
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(tree), *filter(None, [os.environ.get("PYTHONPATH")])])}


class Api:
    """Async HTTP helpers against the cluster's nodes."""

    def __init__(self, rig: ClusterRig) -> None:
        self.rig = rig
        self.http = httpx.AsyncClient(timeout=10.0)
        self.api_key = ""

    async def close(self) -> None:
        await self.http.aclose()

    async def view(self, node: NodeProc) -> dict[str, Any]:
        reply = await self.http.get(f"{node.base_url}/v1/cluster", timeout=2.0, headers=ADMIN_AUTH)
        reply.raise_for_status()
        result: dict[str, Any] = reply.json()
        return result

    async def histogram(self, node: NodeProc, name: str, **labels: str) -> dict[float, float]:
        """Cumulative bucket counts (upper bound in seconds -> count) of histogram ``name`` on
        ``node``'s ``/metrics``, summed over the series matching ``labels``."""
        reply = await self.http.get(f"{node.base_url}/metrics", timeout=5.0)
        reply.raise_for_status()
        buckets: dict[float, float] = {}
        for family in text_string_to_metric_families(reply.text):
            if family.name != name:
                continue
            for sample in family.samples:
                if sample.name.endswith("_bucket") and all(sample.labels.get(k) == v for k, v in labels.items()):
                    bound = float(sample.labels["le"])
                    buckets[bound] = buckets.get(bound, 0.0) + sample.value
        return buckets

    async def wait_healthy(self, node: NodeProc, timeout_s: float = 60.0) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if not node.alive():
                raise RuntimeError(f"{node.node_id} exited:\n{self.rig.tail(node.index)}")
            try:
                if (await self.http.get(f"{node.base_url}/healthz", timeout=1.0)).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            await asyncio.sleep(0.2)
        raise RuntimeError(f"{node.node_id} not healthy within {timeout_s} s:\n{self.rig.tail(node.index)}")

    async def wait_stable(self, expected_nodes: int, timeout_s: float = 60.0) -> dict[str, Any]:
        """Until one plan covers ``expected_nodes`` nodes, every group is held by its primary, and every
        node agrees on the plan version."""
        deadline = time.monotonic() + timeout_s
        last: Any = None
        while time.monotonic() < deadline:
            try:
                views = [await self.view(n) for n in self.rig.live()]
                versions = {v["plan_version"] for v in views}
                view = views[0]
                groups = view["groups"]
                if (
                    len(versions) == 1
                    and None not in versions
                    and len(groups) == expected_nodes
                    and all(g["holder"] == g["primary"] for g in groups)
                    and sum(v["owned_jobs"] for v in views) == sum(g["shards"] for g in groups)
                ):
                    return view
                last = views
            except (httpx.HTTPError, KeyError, IndexError) as error:
                last = error
            await asyncio.sleep(0.2)
        raise AssertionError(f"cluster not stable with {expected_nodes} nodes: {last}")

    async def create_app(self, node: NodeProc) -> str:
        """The rig's app, created through ``node``. A ``503`` (storage unavailable: a preview beside another suite at
        load 19 got one, its body not kept) is asked again, as a client retries one, up to five times; anything else
        raises."""
        body = {"name": "rig", "rate_limit_per_s": 100000, "max_concurrency": 1000}
        headers = {"Authorization": f"Bearer {ADMIN_KEY}"}
        for attempt in range(5):
            reply = await self.http.post(f"{node.base_url}/v1/apps", json=body, headers=headers)
            if reply.status_code != 503 or attempt == 4:
                break
            await asyncio.sleep(1.0)
        reply.raise_for_status()
        self.api_key = str(reply.json()["api_key"])
        return self.api_key

    def _auth(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.api_key}"}

    async def create_at(self, node: NodeProc, at_ms: int, callback_url: str, name: str = "t") -> int:
        body = {
            "name": name,
            "schedule": {"kind": "at", "at": iso_ms(at_ms)},
            "callback": {"url": callback_url},
            "misfire_policy": "fire_now",
        }
        reply = await self.http.post(f"{node.base_url}/v1/tasks", json=body, headers=self._auth())
        reply.raise_for_status()
        return int(reply.json()["id"])

    async def flows(self, node: NodeProc, task_id: int) -> list[dict[str, Any]]:
        reply = await self.http.get(f"{node.base_url}/v1/tasks/{task_id}/flows", headers=self._auth())
        reply.raise_for_status()
        items: list[dict[str, Any]] = reply.json()["items"]
        return items


def created_ms(flow: Mapping[str, Any]) -> int:
    return int(datetime.fromisoformat(str(flow["created_at"]).replace("Z", "+00:00")).timestamp() * 1000)


def now_ms() -> int:
    return time.time_ns() // 1_000_000
