"""The options that choose the node(s) a bench drives (benchmarks/bench_node.py): a mistake is refused
before anything starts."""

from __future__ import annotations

import argparse

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
    ],
)
def test_a_node_choice_that_cannot_work_is_refused_before_anything_starts(argv: tuple[str, ...], refusal: str) -> None:
    with pytest.raises(SystemExit, match=refusal), bench_target(options(*argv)):
        pass


def test_a_running_node_is_driven_as_it_is_with_no_pid_to_measure() -> None:
    with bench_target(options("--url", "http://127.0.0.1:1", "--admin-key", "k")) as (url, key, pids):
        assert (url, key, pids) == ("http://127.0.0.1:1", "k", ())
