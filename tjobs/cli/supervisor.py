"""The supervisor of ``tjobs serve --workers N`` (:mod:`tjobs.cli.workers` says what the workers are).

It opens the API's listening socket, starts N workers (``tjobs serve`` with that socket's descriptor and
a worker index) and then only watches them; it never loads the node or the API (a few MB, no event loop).

* A worker is *ready* once it serves: it writes one line to a pipe the supervisor gave it.
* A worker that dies (``kill -9``, a crash) is started again after a delay that doubles while it keeps
  dying (:class:`RestartPolicy`), each death and restart logged (``worker_exited``, ``worker_restarting``).
* A worker that dies before it is ready ``start_attempts`` times in a row ends the supervisor with exit
  code 1 (``workers_failing_at_start``), the other workers stopped first; one that refuses its start with
  exit code 2 (its settings disagree with the stored data) ends it with 2 at once: no restart can help.
* SIGTERM or SIGINT is forwarded as SIGTERM to every worker, each of which hands its job groups off and
  drains; the supervisor exits once all have, 0 if every one exited cleanly. A second signal, or
  ``stop_timeout_s`` without an exit, kills the workers left (their groups then move when their leases end).
* A worker dies with the supervisor (Linux ``PR_SET_PDEATHSIG``: SIGTERM, the same clean stop).
"""

from __future__ import annotations

import ctypes
import logging
import os
import selectors
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from tjobs.cli.workers import READY_LINE, worker_node_id, worker_settings
from tjobs.settings import Settings

logger = logging.getLogger(__name__)

EXIT_WORKERS_FAILING = 1
EXIT_REFUSED = 2
_PR_SET_PDEATHSIG = 1

WorkerCommand = Callable[[int, int, int], Sequence[str]]
"""The command line of worker ``index`` given (index, listening socket's fd, readiness pipe's fd)."""


@dataclass(frozen=True)
class RestartPolicy:
    first_delay_s: float = 0.5  # the first restart of a worker that died
    max_delay_s: float = 30.0  # the delay doubles per death in a row, up to this
    stable_after_s: float = 60.0  # a worker ready this long has stopped dying: its next restart is the first again
    start_attempts: int = 5  # a worker dying before it is ready this many times in a row ends the supervisor
    stop_timeout_s: float = 60.0  # after SIGTERM, the workers left are killed after this


@dataclass
class _Worker:
    index: int
    node_id: str
    process: subprocess.Popen[bytes] | None = None
    ready_pipe: int | None = None
    ready_since: float | None = None
    deaths_in_a_row: int = 0
    failed_starts: int = 0
    restart_at: float | None = None


class Supervisor:
    """Runs ``workers`` processes made by ``command`` on the inherited ``listener`` until a signal stops it."""

    def __init__(
        self,
        node_ids: Sequence[str],
        listener: socket.socket,
        command: WorkerCommand,
        policy: RestartPolicy | None = None,
    ) -> None:
        self._workers = [_Worker(index, node_id) for index, node_id in enumerate(node_ids)]
        self._listener: socket.socket | None = listener
        self._command = command
        self._policy = policy or RestartPolicy()
        self._selector = selectors.DefaultSelector()
        self._stop_deadline: float | None = None
        self._exit_code = 0

    def run(self) -> int:
        """Start every worker and supervise them; the supervisor's exit code."""
        wake_read, wake_write = socket.socketpair()
        wake_read.setblocking(False)
        wake_write.setblocking(False)
        self._selector.register(wake_read, selectors.EVENT_READ, None)
        previous_wakeup = signal.set_wakeup_fd(wake_write.fileno(), warn_on_full_buffer=False)
        watched = (signal.SIGTERM, signal.SIGINT, signal.SIGCHLD)
        previous = {signum: signal.signal(signum, _noted_on_the_wakeup_fd) for signum in watched}
        try:
            for worker in self._workers:
                self._start(worker)
            while not self._finished():
                for key, _ in self._selector.select(self._timeout()):
                    if key.data is None:
                        self._on_signals(wake_read.recv(4096))
                    else:
                        self._on_ready_pipe(key.data)
                self._reap()
                self._restart_due()
                self._kill_after_stop_timeout()
            logger.info(
                "every worker has exited; supervisor exit code %d",
                self._exit_code,
                extra={"action": "workers_stopped", "exit_code": self._exit_code},
            )
            return self._exit_code
        finally:
            for signum, handler in previous.items():
                signal.signal(signum, handler)
            signal.set_wakeup_fd(previous_wakeup)
            self._close_listener()
            self._selector.close()
            wake_read.close()
            wake_write.close()

    def _finished(self) -> bool:
        return self._stop_deadline is not None and all(worker.process is None for worker in self._workers)

    def _timeout(self) -> float | None:
        moments = [worker.restart_at for worker in self._workers if worker.restart_at is not None]
        if self._stop_deadline is not None:
            moments.append(self._stop_deadline)
        if not moments:
            return None
        return max(min(moments) - time.monotonic(), 0.0)

    def _start(self, worker: _Worker) -> None:
        assert self._listener is not None
        worker.restart_at = None
        ready_read, ready_write = os.pipe()
        os.set_blocking(ready_read, False)
        try:
            worker.process = subprocess.Popen(
                self._command(worker.index, self._listener.fileno(), ready_write),
                pass_fds=(self._listener.fileno(), ready_write),
                preexec_fn=_die_with_parent(os.getpid()),  # safe: the supervisor runs no threads
            )
        except OSError:
            os.close(ready_read)
            raise
        finally:
            os.close(ready_write)
        worker.ready_pipe = ready_read
        worker.ready_since = None
        self._selector.register(ready_read, selectors.EVENT_READ, worker)
        logger.info(
            "worker %d (%s) started as pid %d",
            worker.index,
            worker.node_id,
            worker.process.pid,
            extra={
                "action": "worker_started",
                "worker": worker.index,
                "node_id": worker.node_id,
                "pid": worker.process.pid,
            },
        )

    def _on_ready_pipe(self, worker: _Worker) -> None:
        assert worker.ready_pipe is not None
        try:
            line = os.read(worker.ready_pipe, 64)
        except BlockingIOError:
            return
        if line.startswith(READY_LINE):
            worker.ready_since = time.monotonic()
            worker.failed_starts = 0
            logger.info(
                "worker %d (%s) is serving",
                worker.index,
                worker.node_id,
                extra={"action": "worker_ready", "worker": worker.index, "node_id": worker.node_id},
            )
        self._close_ready_pipe(worker)  # said ready, or closed unready (EOF): nothing more will come

    def _close_ready_pipe(self, worker: _Worker) -> None:
        if worker.ready_pipe is not None:
            self._selector.unregister(worker.ready_pipe)
            os.close(worker.ready_pipe)
            worker.ready_pipe = None

    def _on_signals(self, received: bytes) -> None:
        if any(signum in (signal.SIGTERM, signal.SIGINT) for signum in received):
            if self._stop_deadline is None:
                self._stop(0, "stop requested")
            else:
                self._kill_all("a second stop signal")

    def _stop(self, exit_code: int, why: str) -> None:
        """Forward SIGTERM to every running worker (each hands off and drains) and start no more."""
        self._exit_code = max(self._exit_code, exit_code)
        if self._stop_deadline is not None:
            return
        self._stop_deadline = time.monotonic() + self._policy.stop_timeout_s
        logger.info(
            "%s: stopping %d workers",
            why,
            sum(1 for w in self._workers if w.process),
            extra={"action": "workers_stopping"},
        )
        self._close_listener()  # the workers' copies serve until each has drained; then new connections are refused
        for worker in self._workers:
            worker.restart_at = None
            if worker.process is not None:
                worker.process.send_signal(signal.SIGTERM)

    def _reap(self) -> None:
        for worker in self._workers:
            process = worker.process
            if process is None or process.poll() is None:
                continue
            code = process.returncode
            if worker.ready_pipe is not None:  # a ready line written just before dying is still readable
                self._on_ready_pipe(worker)
            self._close_ready_pipe(worker)
            worker.process = None
            # A worker still loading when the stop came (started again just before it, say) has no handler
            # yet: SIGTERM ends it at once. It held nothing, so that is a clean stop too.
            clean = self._stop_deadline is not None and (
                code == 0 or (code == -signal.SIGTERM and worker.ready_since is None)
            )
            logger.log(
                logging.INFO if clean else logging.WARNING,
                "worker %d (%s, pid %d) exited: %s",
                worker.index,
                worker.node_id,
                process.pid,
                _describe_exit(code),
                extra={"action": "worker_exited", "worker": worker.index, "node_id": worker.node_id, "exit_code": code},
            )
            if self._stop_deadline is not None:
                if not clean:
                    self._exit_code = max(self._exit_code, EXIT_WORKERS_FAILING)
                continue
            self._after_death(worker, code)

    def _after_death(self, worker: _Worker, code: int) -> None:
        now = time.monotonic()
        if worker.ready_since is None:
            if code == EXIT_REFUSED:
                self._stop(EXIT_REFUSED, f"worker {worker.index} refused to start (exit code 2, its reason above)")
                return
            worker.failed_starts += 1
            if worker.failed_starts >= self._policy.start_attempts:
                logger.error(
                    "worker %d died before serving %d times in a row; giving up",
                    worker.index,
                    worker.failed_starts,
                    extra={"action": "workers_failing_at_start", "worker": worker.index},
                )
                self._stop(EXIT_WORKERS_FAILING, "workers keep dying at start")
                return
        stable = worker.ready_since is not None and now - worker.ready_since >= self._policy.stable_after_s
        worker.deaths_in_a_row = 1 if stable else worker.deaths_in_a_row + 1
        delay_s = min(self._policy.first_delay_s * 2 ** (worker.deaths_in_a_row - 1), self._policy.max_delay_s)
        worker.restart_at = now + delay_s
        logger.warning(
            "restarting worker %d (%s) in %.1f s",
            worker.index,
            worker.node_id,
            delay_s,
            extra={"action": "worker_restarting", "worker": worker.index, "delay_s": delay_s},
        )

    def _restart_due(self) -> None:
        now = time.monotonic()
        for worker in self._workers:
            if worker.restart_at is not None and worker.restart_at <= now and self._stop_deadline is None:
                self._start(worker)

    def _kill_after_stop_timeout(self) -> None:
        if self._stop_deadline is not None and time.monotonic() >= self._stop_deadline:
            self._kill_all(f"not stopped within {self._policy.stop_timeout_s:g} s")

    def _kill_all(self, why: str) -> None:
        for worker in self._workers:
            if worker.process is not None and worker.process.poll() is None:
                logger.warning(
                    "killing worker %d (%s): %s",
                    worker.index,
                    worker.node_id,
                    why,
                    extra={"action": "worker_killed", "worker": worker.index},
                )
                worker.process.kill()
        self._exit_code = max(self._exit_code, EXIT_WORKERS_FAILING)
        self._stop_deadline = time.monotonic() + self._policy.stop_timeout_s  # SIGKILL ends them: reaped next

    def _close_listener(self) -> None:
        if self._listener is not None:
            self._listener.close()
            self._listener = None


def _noted_on_the_wakeup_fd(signum: int, frame: object) -> None:
    """The signal's number is on the wakeup fd (:func:`signal.set_wakeup_fd`); the loop reads it there."""


def _die_with_parent(parent: int) -> Callable[[], None] | None:
    """Run in the child before it executes the worker: SIGTERM it when the supervisor dies (Linux)."""
    if not sys.platform.startswith("linux"):
        return None
    prctl = ctypes.CDLL(None, use_errno=True).prctl  # looked up before the fork: the child only calls it

    def arm() -> None:
        prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
        if os.getppid() != parent:  # the supervisor died before the line above
            os.kill(os.getpid(), signal.SIGTERM)

    return arm


def _describe_exit(code: int) -> str:
    if code < 0:
        return f"killed by {signal.Signals(-code).name}"
    return f"exit code {code}"


def open_listener(host: str, port: int, backlog: int = 4096) -> socket.socket:
    """The API's listening socket, shared by the workers (SO_REUSEADDR, as uvicorn binds its own)."""
    family, kind, proto, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)[
        0
    ]
    listener = socket.socket(family, kind, proto)
    try:
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(address)
        listener.listen(backlog)
    except OSError:
        listener.close()
        raise
    return listener


def worker_command(serve_options: Sequence[str]) -> WorkerCommand:
    """``tjobs serve`` with the supervisor's own options (``--config``, ``--port``, ``--json-logs``) and the
    worker's: its index, the listening socket's fd and the readiness pipe's."""

    def command(index: int, listen_fd: int, ready_fd: int) -> list[str]:
        return [
            *(sys.executable, "-m", "tjobs.cli.main", "serve", *serve_options),
            *("--worker-index", str(index), "--listen-fd", str(listen_fd), "--ready-fd", str(ready_fd)),
        ]

    return command


def supervise(settings: Settings, workers: int, serve_options: Sequence[str]) -> int:
    """``tjobs serve --workers N``: listen on the API's address and run the workers until a stop signal."""
    try:
        listener = open_listener(settings.api.host, settings.api.port)
    except OSError as error:
        logger.error(
            "cannot listen on %s:%d (api.host, api.port): %s",
            settings.api.host,
            settings.api.port,
            error,
            extra={"action": "workers_listen_failed"},
        )
        return EXIT_WORKERS_FAILING
    host, port = listener.getsockname()[:2]
    metrics = [worker_settings(settings, index).metrics.listen for index in range(workers)]
    logger.info(
        "API listening on http://%s:%d for %d workers (one socket)%s",
        host,
        port,
        workers,
        f"; their metrics on {', '.join(str(each) for each in metrics)}" if metrics[0] else "",
        extra={"action": "workers_listening", "workers": workers, "port": port},
    )
    node_ids = [worker_node_id(settings, index) for index in range(workers)]
    return Supervisor(node_ids, listener, worker_command(serve_options)).run()
