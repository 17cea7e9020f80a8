"""The supervisor of ``tjobs serve --workers`` (:mod:`tjobs.cli.supervisor`) on stand-in workers.

Each stand-in is a few lines of Python started the way a worker is (its index, the readiness pipe), told
by the test how to behave: serve until SIGTERM, die once then serve, die before serving, refuse its start,
or ignore SIGTERM. The ``stopper`` serves and stops the supervisor, with SIGTERM to its parent, once every
stand-in that will serve says it does: the signal then reaches a supervisor that is watching them all.
"""

from __future__ import annotations

import json
import logging
import os
import select
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tjobs.cli.supervisor import RestartPolicy, Supervisor, worker_command

FAST = RestartPolicy(first_delay_s=0.01, max_delay_s=0.05, stable_after_s=60, start_attempts=3, stop_timeout_s=30)

STAND_IN = r"""
import os, signal, sys, time
from pathlib import Path

index, ready_fd, behaviour, run = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], Path(sys.argv[4])
serving = sum(each in ("stopper", "serve", "die-once", "stubborn") for each in sys.argv[5:])
starts = run / f"starts-{index}"
starts.write_text(starts.read_text() + "x" if starts.exists() else "x")
if behaviour == "refuse":
    sys.exit(2)
if behaviour == "fail" or (behaviour == "die-once" and starts.read_text() == "x"):
    if behaviour == "die-once":
        os.write(ready_fd, b"ready\n")
    os.kill(os.getpid(), signal.SIGKILL)
if behaviour == "starting":  # still loading when the stop comes: no handler yet, never ready
    while True:
        signal.pause()
if behaviour != "stubborn":
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
else:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
os.write(ready_fd, b"ready\n")
(run / f"serving-{index}-{len(starts.read_text())}").touch()
if behaviour == "stopper":
    while len(list(run.glob("serving-*"))) < serving:
        time.sleep(0.01)
    os.kill(os.getppid(), signal.SIGTERM)
while True:
    signal.pause()
"""


@pytest.fixture
def listener() -> Iterator[socket.socket]:
    with socket.create_server(("127.0.0.1", 0)) as sock:
        yield sock


def _run(listener: socket.socket, tmp_path: Path, behaviours: list[str], policy: RestartPolicy = FAST) -> int:
    """Supervise one stand-in per behaviour; the supervisor's exit code."""

    def command(index: int, listen_fd: int, ready_fd: int) -> list[str]:
        return [
            *(sys.executable, "-c", STAND_IN, str(index), str(ready_fd), behaviours[index]),
            *(str(tmp_path), *behaviours),
        ]

    return Supervisor([f"n-w{i}" for i in range(len(behaviours))], listener, command, policy).run()


def _starts(tmp_path: Path, index: int) -> int:
    return len((tmp_path / f"starts-{index}").read_text())


def _actions(caplog: pytest.LogCaptureFixture, action: str) -> list[logging.LogRecord]:
    return [record for record in caplog.records if getattr(record, "action", None) == action]


def test_a_stop_signal_is_forwarded_and_every_worker_exits_cleanly(
    listener: socket.socket, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, "tjobs.cli.supervisor")
    assert _run(listener, tmp_path, ["stopper", "serve"]) == 0
    assert [_starts(tmp_path, 0), _starts(tmp_path, 1)] == [1, 1]
    assert sorted(record.worker for record in _actions(caplog, "worker_ready")) == [0, 1]  # type: ignore[attr-defined]
    assert sorted(record.exit_code for record in _actions(caplog, "worker_exited")) == [0, 0]  # type: ignore[attr-defined]
    assert listener.fileno() == -1, "the supervisor closes the API's socket when it stops"


def test_a_worker_still_starting_when_the_stop_comes_is_a_clean_stop(
    listener: socket.socket, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A worker started again moments before the stop (after a death, say) has not installed its handler yet:
    SIGTERM ends it at once. It held nothing, so the stop is clean (a clean-clone run's supervisor exited 1
    on this, worker killed by SIGTERM while loading)."""
    caplog.set_level(logging.INFO, "tjobs.cli.supervisor")
    assert _run(listener, tmp_path, ["stopper", "starting"]) == 0
    exits = {record.worker: record.exit_code for record in _actions(caplog, "worker_exited")}  # type: ignore[attr-defined]
    assert exits == {0: 0, 1: -15}


def test_a_worker_killed_after_it_served_is_started_again(
    listener: socket.socket, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, "tjobs.cli.supervisor")
    assert _run(listener, tmp_path, ["stopper", "die-once"]) == 0
    assert [_starts(tmp_path, 0), _starts(tmp_path, 1)] == [1, 2]
    deaths = [record.exit_code for record in _actions(caplog, "worker_exited") if record.worker == 1]  # type: ignore[attr-defined]
    assert deaths == [-9, 0]
    assert [record.worker for record in _actions(caplog, "worker_restarting")] == [1]  # type: ignore[attr-defined]


def test_a_worker_dying_at_every_start_ends_the_supervisor_after_the_others_stopped(
    listener: socket.socket, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, "tjobs.cli.supervisor")
    assert _run(listener, tmp_path, ["serve", "fail"]) == 1
    assert _starts(tmp_path, 1) == FAST.start_attempts
    assert [record.worker for record in _actions(caplog, "workers_failing_at_start")] == [1]  # type: ignore[attr-defined]
    assert [r.exit_code for r in _actions(caplog, "worker_exited") if r.worker == 0] == [0]  # type: ignore[attr-defined]


def test_a_worker_refusing_its_start_ends_the_supervisor_at_once_with_exit_code_2(
    listener: socket.socket, tmp_path: Path
) -> None:
    assert _run(listener, tmp_path, ["serve", "refuse"]) == 2
    assert _starts(tmp_path, 1) == 1


def test_a_worker_that_does_not_stop_is_killed_after_the_stop_timeout(
    listener: socket.socket, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, "tjobs.cli.supervisor")
    policy = RestartPolicy(first_delay_s=0.01, start_attempts=3, stop_timeout_s=0.2)
    assert _run(listener, tmp_path, ["stopper", "stubborn"], policy) == 1
    assert [record.worker for record in _actions(caplog, "worker_killed")] == [1]  # type: ignore[attr-defined]


_SUPERVISOR_KILLED = r"""
import json, socket, sys
from tjobs.cli.supervisor import Supervisor

def command(index, listen_fd, ready_fd):
    code = "import os, signal, sys; os.write(int(sys.argv[1]), b'ready\\n'); print(os.getpid(), flush=True)"
    return [sys.executable, "-c", code + "; signal.pause()", str(ready_fd)]

with socket.create_server(("127.0.0.1", 0)) as listener:
    Supervisor(["n-w0"], listener, command).run()
"""


def test_a_worker_ends_when_its_supervisor_is_killed() -> None:
    with subprocess.Popen([sys.executable, "-c", _SUPERVISOR_KILLED], stdout=subprocess.PIPE, text=True) as supervisor:
        assert supervisor.stdout is not None
        worker_pid = int(supervisor.stdout.readline())
        supervisor.kill()
    # The stand-in was started with PR_SET_PDEATHSIG = SIGTERM, which ends it. It is not our child: wait on
    # a pidfd for it (ProcessLookupError: it has already gone).
    try:
        pidfd = os.pidfd_open(worker_pid)
    except ProcessLookupError:
        return
    try:
        readable, _, _ = select.select([pidfd], [], [], 30)
        assert readable, f"worker {worker_pid} still runs 30 s after its supervisor was killed"
    finally:
        os.close(pidfd)


def test_the_worker_command_is_tjobs_serve_with_the_supervisors_options_and_the_workers_own() -> None:
    command = worker_command(["--config", "tjobs.toml", "--json-logs"])(3, 7, 9)
    assert command[1:] == [
        *("-m", "tjobs.cli.main", "serve", "--config", "tjobs.toml", "--json-logs"),
        *("--worker-index", "3", "--listen-fd", "7", "--ready-fd", "9"),
    ]


_LOADED = """
import json, sys
import tjobs.cli.main, tjobs.cli.supervisor
print(json.dumps(sorted(name for name in sys.modules if name.split(".")[0] in ("fastapi", "uvicorn", "sqlalchemy")
      or name.startswith(("tjobs.node", "tjobs.api", "tjobs.console", "tjobs.stores", "tjobs.cluster")))))
"""


def test_the_supervisor_loads_neither_the_node_nor_the_api() -> None:
    """It runs next to N workers for the life of the deployment: it stays a small process."""
    result = subprocess.run([sys.executable, "-c", _LOADED], capture_output=True, text=True, check=True, timeout=60)
    assert json.loads(result.stdout) == []
