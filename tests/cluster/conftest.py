"""Cluster fixtures: real MariaDB (2 servers), etcd and Redis from ``scripts/cluster.sh infra`` in a
state directory of their own (so the tests may kill *that* etcd and Redis, never the shared ones), and
node processes per test. Each rig's schema is migrated once per session under a fresh database prefix.

There may be two such rigs, each with its own state directory and ports; which one a module's tests use,
and the environment that places them (``TJOBS_TEST_CLUSTER_*``, ``TJOBS_TEST_CLUSTER2_*``), is in
``tests/cluster/rigs.py``. Two runs on one machine (a clean-clone ``.ci/run`` next to an engineer's run)
must not share them, since the tests kill and restart them.
"""

from __future__ import annotations

import secrets
import subprocess
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from testkit.cluster_rig import Api, ClusterRig, Infra, start_infra
from testkit.databases import drop_databases
from tests.cluster.rigs import rig_of, rig_place
from tests.receiver import Receiver
from tjobs.settings import StorageSettings


class _Rigs:
    """The session's rigs, each started (``cluster.sh infra``) and migrated when a test first needs it."""

    def __init__(self, tmp_path_factory: pytest.TempPathFactory) -> None:
        self._tmp = tmp_path_factory
        self.infras: dict[int, Infra] = {}
        self.prefixes: dict[int, str] = {}

    def infra(self, number: int) -> Infra:
        if number not in self.infras:
            try:
                place = rig_place(number)
                self.infras[number] = start_infra(
                    place.state_dir,
                    etcd_port=place.etcd_port,
                    redis_port=place.redis_port,
                    mysql_ports=place.mysql_ports,
                )
            except (RuntimeError, subprocess.SubprocessError, OSError) as error:
                message = f"could not start cluster rig {number} with scripts/cluster.sh infra: {error}"
                pytest.fail(message, pytrace=False)
        return self.infras[number]

    def db_prefix(self, number: int) -> str:
        if number not in self.prefixes:
            prefix = f"tjcl_{secrets.token_hex(3)}"
            ClusterRig(self.infra(number), self._tmp.mktemp("migrate"), "migrate", prefix).migrate()
            self.prefixes[number] = prefix
        return self.prefixes[number]


@pytest.fixture(scope="session")
def cluster_rigs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[_Rigs]:
    rigs = _Rigs(tmp_path_factory)
    yield rigs
    for number, prefix in rigs.prefixes.items():
        drop_databases(StorageSettings(urls=rigs.infras[number].storage_urls, database_prefix=prefix))


@pytest.fixture(scope="module")
def infra(cluster_rigs: _Rigs, request: pytest.FixtureRequest) -> Infra:
    """The services of this module's rig (``tests/cluster/rigs.py``)."""
    return cluster_rigs.infra(rig_of(request.path))


@pytest.fixture(scope="module")
def db_prefix(cluster_rigs: _Rigs, infra: Infra, request: pytest.FixtureRequest) -> str:
    """The database prefix migrated on this module's rig, once per rig and session."""
    return cluster_rigs.db_prefix(rig_of(request.path))


@pytest.fixture
def rig(infra: Infra, db_prefix: str, tmp_path: Path) -> Iterator[ClusterRig]:
    infra.ensure()  # a previous test may have killed etcd or Redis
    cluster = ClusterRig(infra, tmp_path, f"t{secrets.token_hex(4)}", db_prefix)
    yield cluster
    cluster.stop_all()


@pytest.fixture
async def api(rig: ClusterRig) -> AsyncIterator[Api]:
    client = Api(rig)
    yield client
    await client.close()


@pytest.fixture
async def receiver() -> AsyncIterator[Receiver]:
    async with Receiver() as started:
        yield started
