"""A tjobs node in a child process, for ``python -m benchmarks fire --embedded`` / ``--storage URL``.

:func:`node_process` writes a TOML settings file, migrates what it names (as ``tjobs migrate --config FILE``
would, in this process: :func:`migrate_in_process`), starts ``tjobs serve --config FILE`` (as
``python -m tjobs.cli.main``), waits until ``GET /readyz`` answers 200
and yields a :class:`NodeHandle`; at exit it sends SIGTERM, then SIGKILL after ``stop_timeout_s``. The
node's output goes to ``node.log`` in the work directory (shown when it fails to start).

Inherited ``TJOBS_*`` environment variables still override the file, as for any ``tjobs serve``.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from testkit.children import checkout_env
from testkit.ports import free_port
from tjobs.errors import TjobsError


class NodeStartError(TjobsError):
    """The node subprocess did not migrate, exited, or never became ready; the message ends with its log."""


@dataclass(frozen=True)
class NodeHandle:
    base_url: str
    admin_key: str
    pid: int
    config_path: Path
    log_path: Path


def node_settings(
    *,
    storage_urls: Sequence[str],
    port: int,
    admin_key: str,
    topology: str | None = None,
    extra: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The settings a bench node runs with (``extra`` is merged in, nested tables included)."""
    storage: dict[str, Any] = {"urls": list(storage_urls)}
    if topology is not None:
        storage["topology"] = topology
    settings: dict[str, Any] = {
        "allow_loopback_callbacks": True,
        "storage": storage,
        "api": {"host": "127.0.0.1", "port": port, "admin_key": admin_key},
        "metrics": {"public": True},  # loopback only; `tjobs serve` refuses open metrics otherwise
    }
    return _merge(settings, dict(extra or {}))


def _merge(base: dict[str, Any], top: Mapping[str, Any]) -> dict[str, Any]:
    merged = dict(base)
    for key, value in top.items():
        if isinstance(value, Mapping) and isinstance(merged.get(key), dict):
            merged[key] = _merge(merged[key], value)
        else:
            merged[key] = value
    return merged


def to_toml(settings: Mapping[str, Any]) -> str:
    """TOML for nested dicts of str / int / float / bool / lists of those (all settings need)."""
    lines: list[str] = []
    _emit_table(settings, [], lines)
    return "\n".join(lines) + "\n"


def _emit_table(table: Mapping[str, Any], path: list[str], lines: list[str]) -> None:
    scalars = {key: value for key, value in table.items() if not isinstance(value, Mapping)}
    tables = {key: value for key, value in table.items() if isinstance(value, Mapping)}
    if path and scalars:
        lines.append(f"[{'.'.join(path)}]")
    for key, value in scalars.items():
        lines.append(f"{key} = {_toml_value(value)}")
    for key, value in tables.items():
        _emit_table(value, [*path, key], lines)


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value)  # a JSON string is a valid TOML basic string
    if isinstance(value, list | tuple):
        return "[" + ", ".join(_toml_value(item) for item in value) + "]"
    raise TypeError(f"cannot write {type(value).__name__} to TOML")


def process_cpu_s(pid: int) -> float | None:
    """CPU time (user + system, seconds) process ``pid`` has used so far, from ``/proc``; ``None`` where
    that cannot be read (not Linux, or the process is gone). CPU per operation survives a loaded machine
    where wall-clock rates do not."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            fields = stat.read().rsplit(b")", 1)[1].split()
    except (OSError, IndexError):
        return None
    ticks = int(fields[11]) + int(fields[12])  # utime, stime (fields 14 and 15 of proc(5))
    return ticks / os.sysconf("SC_CLK_TCK")


@dataclass(frozen=True)
class ThreadsCpu:
    """The scheduler's own account of a process's live threads (``/proc/<pid>/task/*/schedstat``: run
    time in nanoseconds, not sampled ticks), by thread name, with the context switches of each."""

    run_ns: dict[str, int]  # thread name -> CPU time on the scheduler's clock (threads of one name added)
    switches: dict[str, tuple[int, int]]  # thread name -> (voluntary, involuntary) context switches

    @property
    def total_s(self) -> float:
        return sum(self.run_ns.values()) / 1e9

    def since(self, before: ThreadsCpu) -> ThreadsCpu:
        """What each thread used after ``before`` (a thread that ended meanwhile is not counted)."""
        zero = (0, 0)
        return ThreadsCpu(
            {name: ns - before.run_ns.get(name, 0) for name, ns in self.run_ns.items()},
            {
                name: (vol - before.switches.get(name, zero)[0], inv - before.switches.get(name, zero)[1])
                for name, (vol, inv) in self.switches.items()
            },
        )


def threads_cpu(pid: int) -> ThreadsCpu | None:
    """:class:`ThreadsCpu` of process ``pid``; ``None`` where ``/proc`` has no schedstat (not Linux, a
    kernel without scheduler statistics, or the process is gone). ``/proc/<pid>/stat``'s ticks
    (:func:`process_cpu_s`) are sampled at the timer tick, which can misjudge a process that wakes for a
    few microseconds hundreds of times a second; this is the scheduler's exact run time."""
    run_ns: dict[str, int] = {}
    switches: dict[str, tuple[int, int]] = {}
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return None
    for tid in tids:
        base = f"/proc/{pid}/task/{tid}"
        try:
            with open(f"{base}/schedstat", "rb") as stat:
                ns = int(stat.read().split()[0])
            with open(f"{base}/comm", "rb") as comm:
                name = comm.read().strip().decode("utf-8", "replace")
            with open(f"{base}/status", "rb") as status:
                counts = dict(line.split(b":", 1) for line in status.read().splitlines() if b":" in line)
        except (OSError, ValueError, IndexError):
            continue  # the thread ended while it was read
        if tid == str(pid):
            name = "main"
        run_ns[name] = run_ns.get(name, 0) + ns
        vol = int(counts.get(b"voluntary_ctxt_switches", b"0"))
        inv = int(counts.get(b"nonvoluntary_ctxt_switches", b"0"))
        was = switches.get(name, (0, 0))
        switches[name] = (was[0] + vol, was[1] + inv)
    if not run_ns:
        return None
    return ThreadsCpu(run_ns, switches)


@contextlib.contextmanager
def node_process(
    *,
    storage_urls: Sequence[str] | None = None,
    topology: str | None = None,
    port: int | None = None,
    admin_key: str | None = None,
    settings: Mapping[str, Any] | None = None,
    work_dir: Path | None = None,
    migrate_timeout_s: float = 600.0,
    ready_timeout_s: float = 120.0,
    stop_timeout_s: float = 15.0,
    serve_command: Sequence[str] = ("-m", "tjobs.cli.main", "serve"),
) -> Iterator[NodeHandle]:
    """Run a node until the block exits. Without ``storage_urls`` it is the embedded kind: SQLite
    shards in the work directory (a temporary one, removed afterwards, unless ``work_dir`` is given).
    ``serve_command`` is what runs it (``python <serve_command> --config FILE``): ``tjobs serve`` unless
    a bench hosts the node its own way (:mod:`benchmarks.metrics_overhead` ``--interleaved``)."""
    owned_dir = work_dir is None
    directory = Path(tempfile.mkdtemp(prefix="tjobs-bench-")) if work_dir is None else work_dir
    directory.mkdir(parents=True, exist_ok=True)
    try:
        embedded = f"sqlite+aiosqlite:///{(directory / 'data').resolve()}"
        urls = list(storage_urls) if storage_urls else [embedded]
        port = port or free_port()
        admin_key = admin_key or "tja_bench_" + secrets.token_urlsafe(18)
        config_path = directory / "node.toml"
        config_path.write_text(
            to_toml(node_settings(storage_urls=urls, port=port, admin_key=admin_key, topology=topology, extra=settings))
        )
        config_path.chmod(0o600)
        log_path = directory / "node.log"
        with log_path.open("ab") as log:
            migrate_in_process(config_path, migrate_timeout_s, log_path)
            process = subprocess.Popen(
                [sys.executable, *serve_command, "--config", str(config_path)],
                stdout=log,
                stderr=subprocess.STDOUT,
                env=checkout_env(),  # a serve_command of this checkout (-m benchmarks.…) finds its modules
            )
        try:
            base_url = f"http://127.0.0.1:{port}"
            _wait_ready(process, base_url, ready_timeout_s, log_path)
            yield NodeHandle(base_url, admin_key, process.pid, config_path, log_path)
        finally:
            _stop(process, stop_timeout_s)
    finally:
        if owned_dir:
            shutil.rmtree(directory, ignore_errors=True)


def migrate_in_process(config_path: Path, timeout_s: float, log_path: Path | None = None) -> None:
    """What ``tjobs migrate --config FILE`` does (the file, then ``TJOBS_*`` from the environment), in a thread
    of this process with its own event loop, so that a caller inside a running loop may call it too. A second
    interpreter would spend ~1.5 s of CPU importing the CLI, the settings and the stores before the first
    statement (docs/benchmarks.md, "Node start-up"); the suites and benches start many nodes.
    Raises :class:`NodeStartError` naming the failure (and the log's tail, where there is a log)."""
    import threading

    from tjobs.settings import load_settings
    from tjobs.stores.migrate import migrate_sync

    failures: list[BaseException] = []

    def run() -> None:
        try:
            migrate_sync(load_settings(config_path).storage)
        except BaseException as error:  # handed to the caller's thread below
            failures.append(error)

    worker = threading.Thread(target=run, name="tjobs-migrate", daemon=True)
    worker.start()
    worker.join(timeout_s)
    tail = "" if log_path is None else f"\n{_tail(log_path)}"
    if worker.is_alive():
        raise NodeStartError(f"tjobs migrate did not finish within {timeout_s} s{tail}")
    if failures:
        raise NodeStartError(f"tjobs migrate failed: {failures[0]!r}{tail}") from failures[0]


def _wait_ready(process: subprocess.Popen[bytes], base_url: str, timeout_s: float, log_path: Path) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        code = process.poll()
        if code is not None:
            raise NodeStartError(f"tjobs serve exited with {code} before it was ready\n{_tail(log_path)}")
        try:
            with urllib.request.urlopen(f"{base_url}/readyz", timeout=2) as response:
                if response.status == 200:
                    return
        except (urllib.error.URLError, OSError):
            pass  # not listening yet, or 503 until it owns its jobs
        if time.monotonic() > deadline:
            raise NodeStartError(f"tjobs serve was not ready within {timeout_s} s\n{_tail(log_path)}")
        time.sleep(0.2)


def _stop(process: subprocess.Popen[bytes], timeout_s: float) -> None:
    if process.poll() is not None:
        return
    process.send_signal(signal.SIGTERM)
    try:
        process.wait(timeout_s)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def _tail(path: Path, lines: int = 30) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return ""
    return "\n".join(text.splitlines()[-lines:])
