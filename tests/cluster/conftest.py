"""Cluster fixtures: real MariaDB (2 servers), etcd and Redis from ``scripts/cluster.sh infra`` in a
state directory of their own (so the tests may kill *that* etcd and Redis, never the shared ones), and
node processes per test. The schema is migrated once per session under a fresh database prefix.
"""

from __future__ import annotations

import os
import secrets
import subprocess
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from tests.receiver import Receiver
from tjobs.settings import StorageSettings
from tjobs.testing.cluster_rig import Api, ClusterRig, Infra, start_infra
from tjobs.testing.databases import drop_databases

STATE_DIR = Path(os.environ.get("TJOBS_TEST_CLUSTER_DIR", "/tmp/tjobs-cluster-tests"))


@pytest.fixture(scope="session")
def infra() -> Infra:
    try:
        return start_infra(STATE_DIR)
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
