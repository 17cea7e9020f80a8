"""Fault-suite fixtures: the cluster services of ``scripts/cluster.sh infra`` (2 MariaDB servers, etcd,
Redis) in a state directory whose processes these tests may kill and freeze, node processes per test, and
the recording receiver.

By default the suite shares ``tests/cluster``'s services (same state directory and ports, including those
moved by ``TJOBS_TEST_CLUSTER_*``), so one set of servers serves both. ``TJOBS_TEST_CHAOS_DIR``,
``TJOBS_TEST_CHAOS_MYSQL_PORTS`` ("3307 3308"), ``TJOBS_TEST_CHAOS_ETCD_PORT`` and
``TJOBS_TEST_CHAOS_REDIS_PORT`` move it elsewhere. A server answering on
those ports that this state directory did not start is never signalled: the faults on it fail instead.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import signal
import subprocess
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from testkit.cluster_rig import ClusterRig, Infra, start_infra
from testkit.databases import drop_databases
from tests.chaos.receiver import ChaosReceiver
from tests.chaos.scenario import OUTCOMES
from tjobs.settings import StorageSettings

STATE_DIR = Path(
    os.environ.get("TJOBS_TEST_CHAOS_DIR") or os.environ.get("TJOBS_TEST_CLUSTER_DIR", "/tmp/tjobs-cluster-tests")
)


def _setting(name: str, default: str) -> str:
    """``TJOBS_TEST_CHAOS_<name>``, else ``TJOBS_TEST_CLUSTER_<name>`` (shared with tests/cluster), else ``default``."""
    return os.environ.get(f"TJOBS_TEST_CHAOS_{name}") or os.environ.get(f"TJOBS_TEST_CLUSTER_{name}", default)


MYSQL_PORTS = _setting("MYSQL_PORTS", "3307 3308")
ETCD_PORT = int(_setting("ETCD_PORT", "23795"))
REDIS_PORT = int(_setting("REDIS_PORT", "6395"))
SERVICES = ("mariadb1", "mariadb2", "etcd", "redis")


@pytest.fixture(scope="session")
def chaos_infra() -> Infra:
    try:
        return start_infra(STATE_DIR, etcd_port=ETCD_PORT, redis_port=REDIS_PORT, mysql_ports=MYSQL_PORTS)
    except (RuntimeError, subprocess.SubprocessError, OSError) as error:
        pytest.fail(f"could not start the cluster services with scripts/cluster.sh infra: {error}", pytrace=False)


@pytest.fixture(scope="session")
def chaos_db_prefix(chaos_infra: Infra, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    prefix = f"tjch_{secrets.token_hex(3)}"
    ClusterRig(chaos_infra, tmp_path_factory.mktemp("migrate"), "migrate", prefix).migrate()
    yield prefix
    _resume_all(chaos_infra)
    drop_databases(StorageSettings(urls=chaos_infra.storage_urls, database_prefix=prefix))


def _resume_all(infra: Infra) -> None:
    """SIGCONT to every service this state directory started (a no-op unless a fault froze it)."""
    for name in SERVICES:
        with contextlib.suppress(RuntimeError):
            infra.signal_service(name, signal.SIGCONT)


@pytest.fixture
def rig(chaos_infra: Infra, chaos_db_prefix: str, tmp_path: Path) -> Iterator[ClusterRig]:
    _resume_all(chaos_infra)
    chaos_infra.ensure()  # a previous test may have killed a server
    cluster = ClusterRig(chaos_infra, tmp_path, f"c{secrets.token_hex(4)}", chaos_db_prefix)
    yield cluster
    cluster.stop_all()
    _resume_all(chaos_infra)


@pytest.fixture
async def receiver() -> AsyncIterator[ChaosReceiver]:
    async with ChaosReceiver() as started:
        yield started


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """One line of figures per fault run (lost, duplicate flows, phantom, lateness, load average)."""
    if OUTCOMES:
        terminalreporter.section("fault suite figures")
        for outcome in OUTCOMES:
            terminalreporter.write_line(outcome.summary())
