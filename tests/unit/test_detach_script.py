"""scripts/detach.sh starts the servers of scripts/services.sh and scripts/cluster.sh: a daemon must not
inherit its starter's file descriptors. `flock /tmp/heavy.lock make test` started etcd, which held the
lock (an inherited descriptor) for as long as it ran: every later `flock` on it waited forever."""

from __future__ import annotations

import fcntl
import os
import signal
import subprocess
import time
from pathlib import Path

DETACH = Path(__file__).resolve().parents[2] / "scripts" / "detach.sh"


def test_a_detached_daemon_holds_no_descriptor_of_its_starter(tmp_path: Path) -> None:
    lock_path, pidfile = tmp_path / "held.lock", tmp_path / "daemon.pid"
    with open(lock_path, "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        subprocess.run(
            ["bash", str(DETACH), str(pidfile), str(tmp_path), "sleep", "30"],
            check=True,
            pass_fds=(lock.fileno(),),  # as a shell holding `flock` passes it on
            stdout=subprocess.DEVNULL,
        )
    deadline = time.monotonic() + 5
    while not pidfile.exists() or not pidfile.read_text().strip():
        assert time.monotonic() < deadline, "no pidfile"
        time.sleep(0.05)
    pid = int(pidfile.read_text())
    try:
        assert sorted(int(fd) for fd in os.listdir(f"/proc/{pid}/fd")) == [0, 1, 2]
        assert os.readlink(f"/proc/{pid}/cwd") == str(tmp_path)
        with open(lock_path) as again:
            fcntl.flock(again, fcntl.LOCK_EX | fcntl.LOCK_NB)  # free: the daemon does not hold it
    finally:
        os.kill(pid, signal.SIGTERM)
