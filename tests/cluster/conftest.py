"""Cluster fixtures: real MariaDB (2 servers), etcd and Redis from ``scripts/cluster.sh infra`` in a
state directory of their own (so the tests may kill *that* etcd and Redis, never the shared ones), and
node processes per test. The schema is migrated once per session under a fresh database prefix.

``TJOBS_TEST_CLUSTER_DIR`` (``/tmp/tjobs-cluster-tests``), ``TJOBS_TEST_CLUSTER_MYSQL_PORTS`` ("3307 3308"),
``TJOBS_TEST_CLUSTER_ETCD_PORT`` (23795) and ``TJOBS_TEST_CLUSTER_REDIS_PORT`` (6395) move the services
elsewhere: two runs on one machine (a clean-clone ``.ci/run`` next to an engineer's run) must not share
them, since the tests kill and restart them.
"""

from __future__ import annotations

import os
import secrets
import subprocess
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from testkit.cluster_rig import Api, ClusterRig, Infra, start_infra
from testkit.databases import drop_databases
from tests.receiver import Receiver
from tjobs.settings import StorageSettings

STATE_DIR = Path(os.environ.get("TJOBS_TEST_CLUSTER_DIR", "/tmp/tjobs-cluster-tests"))
MYSQL_PORTS = os.environ.get("TJOBS_TEST_CLUSTER_MYSQL_PORTS", "3307 3308")
ETCD_PORT = int(os.environ.get("TJOBS_TEST_CLUSTER_ETCD_PORT", "23795"))
REDIS_PORT = int(os.environ.get("TJOBS_TEST_CLUSTER_REDIS_PORT", "6395"))


@pytest.fixture(scope="session")
def infra() -> Infra:
    try:
        return start_infra(STATE_DIR, etcd_port=ETCD_PORT, redis_port=REDIS_PORT, mysql_ports=MYSQL_PORTS)
    except (RuntimeError, subprocess.SubprocessError, OSError) as error:
        message = f"could not start the cluster services with scripts/cluster.sh infra: {error}"
        pytest.fail(message, pytrace=False)


@pytest.fixture(scope="session")
def db_prefix(infra: Infra, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    prefix = f"tjcl_{secrets.token_hex(3)}"
    rig = ClusterRig(infra, tmp_path_factory.mktemp("migrate"), "migrate", prefix)
    rig.migrate()
    yield prefix
    drop_databases(StorageSettings(urls=infra.storage_urls, database_prefix=prefix))


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
