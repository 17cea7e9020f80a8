"""``scripts/bench_db.sh``: the benchmarks' own MariaDB, started with the sizing it states, stopped only by
the script that started it, and never taking over a port something else answers on."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from testkit.children import REPO
from testkit.ports import free_port

pytestmark = pytest.mark.mariadb


def bench_db(command: str, state: Path, port: int) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        "TJOBS_BENCH_DB_PORT": str(port),
        "TJOBS_BENCH_DB_DIR": str(state),
        "TJOBS_BENCH_DB_POOL": "64M",
        "TJOBS_BENCH_DB_REDO": "48M",
    }
    return subprocess.run(
        ["bash", str(REPO / "scripts" / "bench_db.sh"), command],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_up_starts_a_server_of_the_stated_size_and_down_stops_only_its_own(tmp_path: Path, mysql_url: str) -> None:
    port = free_port()
    started = bench_db("up", tmp_path / "bench-db", port)
    try:
        assert started.returncode == 0, started.stderr
        assert started.stdout.strip() == f"mysql+asyncmy://root@127.0.0.1:{port}"
        assert "64 MiB pool, 48 MiB redo, started by this script" in started.stderr
        again = bench_db("up", tmp_path / "bench-db", port)
        assert again.returncode == 0 and "already answers" in again.stderr
        # Another state directory, the same port: it answers, so it is left alone, and not stopped.
        other = bench_db("up", tmp_path / "other", port)
        assert "left as it is" in other.stderr
        assert "nothing stopped" in bench_db("down", tmp_path / "other", port).stderr
        assert bench_db("status", tmp_path / "bench-db", port).returncode == 0
    finally:
        stopped = bench_db("down", tmp_path / "bench-db", port)
    assert stopped.returncode == 0, stopped.stderr
    status = bench_db("status", tmp_path / "bench-db", port)
    assert status.returncode == 1 and "nothing answers" in status.stderr
