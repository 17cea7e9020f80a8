"""The options that choose the node(s) a bench drives (benchmarks/bench_node.py): a mistake is refused
before anything starts."""

from __future__ import annotations

import argparse
import contextlib
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from benchmarks.bench_node import bench_target, target_options


def options(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    target_options(parser)
    return parser.parse_args(list(argv))


@pytest.mark.parametrize(
    ("argv", "refusal"),
    [
        (("--storage", "mysql+asyncmy://root@127.0.0.1:1", "--nodes", "0"), "--nodes must be >= 1"),
        (("--storage", "mysql+asyncmy://root@127.0.0.1:1", "--nodes", "2"), r"needs --storage \(MariaDB\) and --etcd"),
        (("--embedded", "--nodes", "2", "--etcd", "http://127.0.0.1:1"), r"needs --storage \(MariaDB\) and --etcd"),
        (("--url", "http://127.0.0.1:1"), "--admin-key is required with --url"),
        (("--storage", "mysql+asyncmy://root@127.0.0.1:1", "--workers", "2"), "--workers N needs N >= 1, --storage"),
        (("--embedded", "--workers", "2", "--etcd", "http://127.0.0.1:1"), "--workers N needs"),
        (("--storage", "m", "--etcd", "e", "--workers", "0"), "--workers N needs N >= 1"),
        (("--storage", "m", "--etcd", "e", "--workers", "2", "--nodes", "2"), "and no --nodes"),
    ],
)
def test_a_node_choice_that_cannot_work_is_refused_before_anything_starts(argv: tuple[str, ...], refusal: str) -> None:
    with pytest.raises(SystemExit, match=refusal), bench_target(options(*argv)):
        pass


def test_a_running_node_is_driven_as_it_is_with_no_pid_to_measure() -> None:
    with bench_target(options("--url", "http://127.0.0.1:1", "--admin-key", "k")) as (url, key, pids):
        assert (url, key, pids) == ("http://127.0.0.1:1", "k", ())


def test_node_dir_keeps_each_started_nodes_work_directory(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """``--node-dir`` is handed to the node as its work directory (kept afterwards: its node.log), one
    per node when several are started."""
    import testkit.node_process as node_process_module

    given: list[Path | None] = []

    @contextlib.contextmanager
    def fake_node_process(**kwargs: Any) -> Iterator[SimpleNamespace]:
        given.append(kwargs.get("work_dir"))
        yield SimpleNamespace(pid=len(given), base_url=f"http://127.0.0.1:{len(given)}", log_path="-")

    monkeypatch.setattr(node_process_module, "node_process", fake_node_process)
    monkeypatch.setattr("benchmarks.bench_node.wait_for_shares", lambda urls, key: None)
    monkeypatch.setenv("TJOBS_STORAGE__DATABASE_PREFIX", "tjbench_unused")  # no fresh prefix to drop
    with bench_target(options("--embedded", "--node-dir", str(tmp_path / "one"))):
        pass
    storage = ("--storage", "mysql+asyncmy://root@127.0.0.1:1", "--etcd", "http://127.0.0.1:1")
    with bench_target(options(*storage, "--nodes", "2", "--node-dir", str(tmp_path / "two"))):
        pass
    with bench_target(options("--embedded")):
        pass
    assert given == [tmp_path / "one", tmp_path / "two" / "node-1", tmp_path / "two" / "node-2", None]


def test_workers_start_one_supervisor_whose_workers_cpu_is_measured(monkeypatch: pytest.MonkeyPatch) -> None:
    """``--workers N`` runs ``tjobs serve --workers N`` with a metrics port per worker, and hands the bench
    the supervisor's pid and its workers' (their CPU summed into the node figures)."""
    import testkit.node_process as node_process_module

    given: list[dict[str, Any]] = []

    @contextlib.contextmanager
    def fake_node_process(**kwargs: Any) -> Iterator[SimpleNamespace]:
        given.append(kwargs)
        yield SimpleNamespace(pid=100, base_url="http://127.0.0.1:1", log_path="-")

    monkeypatch.setattr(node_process_module, "node_process", fake_node_process)
    monkeypatch.setattr("benchmarks.bench_node.wait_for_workers", lambda url, key, workers: None)
    monkeypatch.setattr("benchmarks.bench_node.children_of", lambda pid: (101, 102))
    monkeypatch.setenv("TJOBS_STORAGE__DATABASE_PREFIX", "tjbench_unused")
    storage = ("--storage", "mysql+asyncmy://root@127.0.0.1:1", "--etcd", "http://127.0.0.1:1")
    with bench_target(options(*storage, "--workers", "2")) as (url, _, pids):
        assert (url, pids) == ("http://127.0.0.1:1", (100, 101, 102))
    [started] = given
    assert started["serve_command"] == ("-m", "tjobs.cli.main", "serve", "--workers", "2")
    assert started["settings"]["metrics"]["listen"].startswith("127.0.0.1:")
