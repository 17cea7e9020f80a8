"""A MariaDB server of our own for tests and benchmarks: ``mariadb-install-db`` into a directory, then
``mariadbd`` on a free loopback port; stopped by its own PID (SIGTERM, then SIGKILL) at the end, never
any other server."""

from __future__ import annotations

import contextlib
import shutil
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pymysql

from testkit.ports import free_port


@dataclass(frozen=True, slots=True)
class OwnMariaDB:
    url: str  # mysql+asyncmy://root@127.0.0.1:PORT
    pid: int
    log_path: Path


@contextlib.contextmanager
def own_mariadb(
    directory: Path, *extra_args: str, start_timeout_s: float = 60.0, stop_timeout_s: float = 30.0
) -> Iterator[OwnMariaDB]:
    """Start a server whose data lives in ``directory`` (``extra_args`` go to ``mariadbd``: buffer pool,
    table caches…). Raises RuntimeError naming the log when it does not answer within
    ``start_timeout_s``."""
    install = shutil.which("mariadb-install-db")
    server = shutil.which("mariadbd") or shutil.which("mariadbd", path="/usr/sbin:/usr/local/sbin:/sbin")
    if install is None or server is None:
        raise RuntimeError("mariadb-install-db and mariadbd are needed to start a MariaDB server of our own")
    port = free_port()
    data = directory / "data"
    # A temporary directory of its own: a starting mariadbd deletes every #sql* file in its tmpdir, and in
    # the shared /tmp those include the temporary tables of another server's mariadb-install-db at work.
    tmp = directory / "tmp"
    tmp.mkdir(parents=True, exist_ok=True)
    installed = subprocess.run(
        [install, "--no-defaults", "--user=root", f"--datadir={data}", f"--tmpdir={tmp}", "--skip-test-db",
         "--auth-root-authentication-method=normal"],
        capture_output=True, text=True, timeout=180,
    )  # fmt: skip
    if installed.returncode != 0:
        said = (installed.stdout + installed.stderr)[-3000:]
        raise RuntimeError(f"mariadb-install-db into {data} exited {installed.returncode}:\n{said}")
    log_path = directory / "mariadbd.log"
    with log_path.open("w") as log:
        process = subprocess.Popen(
            [server, "--no-defaults", "--user=root", f"--datadir={data}", f"--tmpdir={tmp}",
             f"--socket={directory / 'sock'}", f"--port={port}", "--bind-address=127.0.0.1", "--skip-name-resolve",
             "--character-set-server=utf8mb4",
             "--collation-server=utf8mb4_general_ci", f"--pid-file={directory / 'pid'}", "--skip-log-bin",
             *extra_args],
            stdout=log, stderr=subprocess.STDOUT,
        )  # fmt: skip
    try:
        deadline = time.monotonic() + start_timeout_s
        while True:
            try:
                pymysql.connect(host="127.0.0.1", port=port, user="root", connect_timeout=1).close()
                break
            except pymysql.err.OperationalError:
                if process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"our MariaDB on port {port} did not start; see {log_path}") from None
                time.sleep(0.2)
        yield OwnMariaDB(f"mysql+asyncmy://root@127.0.0.1:{port}", process.pid, log_path)
    finally:
        process.terminate()
        try:
            process.wait(timeout=stop_timeout_s)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
