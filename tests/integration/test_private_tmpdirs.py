"""A MariaDB server the tests start leaves the shared /tmp alone: a starting mariadbd deletes every ``#sql*``
file in its tmpdir, and in /tmp those were the temporary tables of another server's ``mariadb-install-db``
at work (a clean-clone run's cluster rig failed to install: "Unknown table 'mysql.tmp_proxies_priv'",
the chaos rig's servers starting beside it). Each server now has a tmpdir of its own."""

from __future__ import annotations

import os
import secrets
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from testkit.own_mariadb import own_mariadb
from testkit.ports import free_port_range

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def another_servers_temporary_table() -> Iterator[Path]:
    path = Path(tempfile.gettempdir()) / f"#sql-temptable-tjobs-probe-{secrets.token_hex(4)}"
    path.write_text("a temporary table of another server's mariadb-install-db")
    yield path
    path.unlink(missing_ok=True)


def test_our_own_mariadb_starts_without_deleting_anything_in_the_shared_tmp(
    tmp_path: Path, another_servers_temporary_table: Path
) -> None:
    with own_mariadb(tmp_path / "own"):
        pass
    assert another_servers_temporary_table.exists()


def test_the_cluster_rigs_servers_start_without_deleting_anything_in_the_shared_tmp(
    tmp_path: Path, another_servers_temporary_table: Path
) -> None:
    rig = tmp_path / "rig"
    etcd = free_port_range(2)
    env = {
        **os.environ,
        "TJOBS_CLUSTER_DIR": str(rig),
        "TJOBS_CLUSTER_MYSQL_PORTS": f"{free_port_range(2)} {free_port_range(2)}",
        "TJOBS_CLUSTER_ETCD_PORT": str(etcd),
        "TJOBS_CLUSTER_REDIS_PORT": str(free_port_range(2)),
    }
    script = str(ROOT / "scripts" / "cluster.sh")
    try:
        started = subprocess.run(["bash", script, "infra"], env=env, capture_output=True, text=True, timeout=180)
        assert started.returncode == 0, started.stderr[-2000:]
        assert another_servers_temporary_table.exists()
    finally:
        subprocess.run(["bash", script, "down"], env=env, capture_output=True, timeout=120)
