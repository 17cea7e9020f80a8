"""Short-lived broker instances of the tests' own, on free loopback ports, to kill and restart at will.

The shared brokers of ``scripts/services.sh`` are never stopped by a test; a test that needs a broker
to die (``kill -9``), come back on the same port with the same data, require credentials or run out of
memory starts one of these instead:

* :class:`OwnNats` — ``nats-server -js`` with its JetStream store in a temporary directory (~0.1 s);
* :class:`OwnRedis` — ``redis-server`` with an append-only file fsynced on every write, so what it
  acknowledged survives ``kill -9`` (~0.1 s);
* :class:`OwnRabbitMQ` — a RabbitMQ node of its own (node name, AMQP and distribution ports, Mnesia
  and log directories, config) under a temporary directory; it registers with the machine's ``epmd``
  (~3 s to start on this project's machines, ~3 s to restart after ``kill -9``).

Each runs in its own process group; :meth:`OwnBroker.kill` sends SIGKILL to that group,
:meth:`OwnBroker.restart_cleanly` stops it with SIGTERM and starts it again (what it held in memory
written), and :meth:`OwnBroker.stop` (also on leaving ``with``) ends it. A missing binary makes the test fail.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from abc import ABC, abstractmethod
from pathlib import Path
from types import TracebackType

from testkit.ports import free_port

READY_TIMEOUT_S = 60.0
HOST = "127.0.0.1"


def _binary(name: str, *fallbacks: str) -> str:
    for candidate in (name, *fallbacks):
        found = shutil.which(candidate) or (candidate if os.access(candidate, os.X_OK) else None)
        if found:
            return found
    raise RuntimeError(f"{name} is not installed: scripts/services.sh up installs it")


class OwnBroker(ABC):
    """One broker process of the test's own: started on a free port, killed and restarted on demand."""

    def __init__(self) -> None:
        self.directory = Path(tempfile.mkdtemp(prefix=f"tjobs-{type(self).__name__.lower()}-"))
        self.port = free_port()
        self._process: subprocess.Popen[bytes] | None = None
        self.started_in_s = 0.0  # how long the last start took until the broker answered

    @abstractmethod
    def _command(self) -> tuple[list[str], dict[str, str]]:
        """The command line and the extra environment of the broker."""

    @abstractmethod
    def _answers(self) -> bool:
        """Whether the broker answers its protocol on :attr:`port` now."""

    @property
    def url(self) -> str:
        return self._url()

    @abstractmethod
    def _url(self) -> str: ...

    def start(self) -> None:
        command, environment = self._command()
        log = (self.directory / "broker.log").open("ab")
        begun = time.monotonic()
        self._process = subprocess.Popen(
            command,
            cwd=self.directory,
            env={**os.environ, **environment},
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        log.close()
        deadline = begun + READY_TIMEOUT_S
        while not self._answers():
            if self._process.poll() is not None:
                raise RuntimeError(f"{command[0]} exited with {self._process.returncode}: {self._log_tail()}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"{command[0]} did not answer within {READY_TIMEOUT_S} s: {self._log_tail()}")
            time.sleep(0.05)
        self.started_in_s = time.monotonic() - begun

    def kill(self) -> None:
        """``kill -9`` the broker (its whole process group) and reap it."""
        process = self._process
        if process is None:
            return
        self._process = None
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait()

    def restart(self) -> None:
        """Start again on the same port with the same data."""
        self.kill()
        self.start()

    def restart_cleanly(self) -> None:
        """Stop with SIGTERM, wait until the broker has exited, and start it again on the same port.

        A clean stop writes what the broker answered for but still held in memory: RabbitMQ 3.10
        answers ``queue.declare-ok`` for a durable queue before the queue is on disk, and a kill -9
        a second later lost it in 2 of 4 tries (run by hand, 2026-12-02). A test that kills the
        broker restarts it cleanly once after declaring what must survive."""
        process = self._process
        if process is not None:
            self._process = None
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGTERM)
            try:
                process.wait(READY_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.pid, signal.SIGKILL)
                process.wait()
                raise RuntimeError(f"the broker did not stop within {READY_TIMEOUT_S} s of SIGTERM") from None
        self.start()

    def stop(self) -> None:
        self.kill()
        shutil.rmtree(self.directory, ignore_errors=True)

    def __enter__(self) -> OwnBroker:
        self.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None, tb: TracebackType | None) -> None:
        self.stop()

    def _log_tail(self) -> str:
        try:
            return (self.directory / "broker.log").read_text(errors="replace")[-2000:]
        except OSError:
            return "(no log)"


def _greeting(port: int, send: bytes = b"") -> bytes:
    try:
        with socket.create_connection((HOST, port), timeout=1.0) as sock:
            if send:
                sock.sendall(send)
            sock.settimeout(1.0)
            return sock.recv(4096)
    except OSError:
        return b""


class OwnNats(OwnBroker):
    """``nats-server`` with JetStream; with ``username``/``password`` (or a ``token``) it requires them."""

    def __init__(self, username: str | None = None, password: str | None = None, token: str | None = None) -> None:
        super().__init__()
        self.username = username
        self.password = password
        self.token = token

    def _command(self) -> tuple[list[str], dict[str, str]]:
        command = [_binary("nats-server"), "-a", HOST, "-p", str(self.port), "-js", "-sd", str(self.directory)]
        if self.username is not None:
            command += ["--user", self.username, "--pass", self.password or ""]
        if self.token is not None:
            command += ["--auth", self.token]
        return command, {}

    def _answers(self) -> bool:
        return _greeting(self.port).startswith(b"INFO ")

    def _url(self) -> str:
        return f"nats://{HOST}:{self.port}"


class OwnRedis(OwnBroker):
    """``redis-server`` whose acknowledged writes survive ``kill -9`` (``appendfsync always``)."""

    def __init__(self, password: str | None = None, maxmemory_bytes: int | None = None) -> None:
        super().__init__()
        self.password = password
        self.maxmemory_bytes = maxmemory_bytes

    def _command(self) -> tuple[list[str], dict[str, str]]:
        command = [_binary("redis-server"), "--port", str(self.port), "--bind", HOST, "--dir", str(self.directory)]
        command += ["--save", "", "--appendonly", "yes", "--appendfsync", "always", "--daemonize", "no"]
        if self.password is not None:
            command += ["--requirepass", self.password]
        if self.maxmemory_bytes is not None:
            command += ["--maxmemory", str(self.maxmemory_bytes), "--maxmemory-policy", "noeviction"]
        return command, {}

    def _answers(self) -> bool:
        reply = _greeting(self.port, b"PING\r\n")
        return reply.startswith((b"+PONG", b"-NOAUTH"))

    def _url(self) -> str:
        return f"redis://{HOST}:{self.port}/0"


class OwnRabbitMQ(OwnBroker):
    """A RabbitMQ node of its own; ``guest``/``guest`` may log in from loopback, or, with ``username`` and
    ``password``, only that user (created at the node's first start instead of ``guest``)."""

    def __init__(self, username: str | None = None, password: str | None = None) -> None:
        super().__init__()
        self.dist_port = free_port()
        self.node_name = f"tjobs-test-{self.port}@localhost"
        self.username = username
        self.password = password

    def _command(self) -> tuple[list[str], dict[str, str]]:
        config = f"listeners.tcp.default = {HOST}:{self.port}\n"
        if self.username is not None:
            config += f"default_user = {self.username}\ndefault_pass = {self.password or ''}\n"
        (self.directory / "rabbitmq.conf").write_text(config)
        (self.directory / "rabbitmq-env.conf").write_text("")
        (self.directory / "enabled_plugins").write_text("[].\n")
        server = _binary("/usr/lib/rabbitmq/bin/rabbitmq-server", "rabbitmq-server")
        environment = {
            "HOME": str(self.directory),
            "RUNNING_UNDER_SYSTEMD": "1",  # the start script execs the VM: one process to kill
            "RABBITMQ_CONF_ENV_FILE": str(self.directory / "rabbitmq-env.conf"),
            "RABBITMQ_CONFIG_FILE": str(self.directory / "rabbitmq.conf"),
            "RABBITMQ_ENABLED_PLUGINS_FILE": str(self.directory / "enabled_plugins"),
            "RABBITMQ_NODENAME": self.node_name,
            "RABBITMQ_NODE_PORT": str(self.port),
            "RABBITMQ_DIST_PORT": str(self.dist_port),
            "RABBITMQ_MNESIA_BASE": str(self.directory / "mnesia"),
            "RABBITMQ_LOG_BASE": str(self.directory / "log"),
            "ERL_EPMD_ADDRESS": HOST,
            "RABBITMQ_SERVER_ERL_ARGS": "-kernel inet_dist_use_interface {127,0,0,1}",
        }
        return [server], environment

    def _answers(self) -> bool:
        return _greeting(self.port, b"AMQP\x00\x00\x09\x01")[:3] == b"\x01\x00\x00"

    def _url(self) -> str:
        return f"amqp://{HOST}:{self.port}/"
