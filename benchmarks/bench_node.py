"""The node a bench drives, and the command-line options that choose it (``--url``, ``--embedded``,
``--storage``, ``--topology``, ``--nodes``, ``--workers``, ``--etcd``, ``--json``): shared by ``python -m benchmarks
fire`` / ``register`` and the benches that drive a node the same way (:mod:`benchmarks.protocol_fire`)."""

from __future__ import annotations

import argparse
import contextlib
import os
import secrets
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from rich.console import Console

console = Console(stderr=True)


@contextlib.contextmanager
def bench_target(
    args: argparse.Namespace, settings: Mapping[str, Any] | None = None
) -> Iterator[tuple[str, str, tuple[int, ...]]]:
    """The node a bench drives: a running one (--url), or ``--nodes`` started for the run and stopped after
    (then their pids come too, for the nodes' CPU figures). A node started on ``--storage`` gets a fresh
    ``tjbench_<hex>`` database prefix, dropped afterwards, unless ``TJOBS_STORAGE__DATABASE_PREFIX``
    names one: a run never writes into the default ``tjobs_*`` databases, and runs do not pile up
    databases on the server (thousands of leftover tables slowed MariaDB enough to add seconds of
    lateness to later runs). ``settings`` go to a started node (``targets.allowed_addresses``, ...).

    ``--nodes N`` (N > 1, with ``--storage`` and ``--etcd``) starts a cluster of N nodes on this machine,
    coordinated through etcd under a cluster name of the run's own, and yields the first node's URL once
    every node fires its share of the jobs (the plan placed, each group held by its primary).

    ``--workers N`` (with ``--storage`` and ``--etcd``) starts one ``tjobs serve --workers N`` instead: N
    worker processes behind one URL (docs/operations.md, "Workers"), their metrics on ports of their own; it
    yields once the plan is placed over the N workers, with the pids of the supervisor and the workers
    (their CPU summed, as for ``--nodes``).

    ``--node-dir DIR`` keeps a started node's work directory (``node.log``, ``node.toml``) in ``DIR``
    after the run, to read its log against the bench's figures; with ``--nodes N`` each node gets
    ``DIR/node-<i>``."""
    from testkit.databases import drop_databases
    from testkit.node_process import node_process
    from testkit.ports import free_port_range
    from tjobs.settings import StorageSettings

    if args.url:
        if not args.admin_key:
            raise SystemExit("--admin-key is required with --url")
        yield args.url, args.admin_key, ()
        return
    if not args.embedded and not args.storage:
        raise SystemExit("give --url, --embedded or --storage")
    if args.nodes < 1:
        raise SystemExit("--nodes must be >= 1")
    if args.nodes > 1 and not (args.storage and args.etcd):
        raise SystemExit("--nodes above 1 needs --storage (MariaDB) and --etcd: a cluster on one machine")
    workers: int | None = getattr(args, "workers", None)
    if workers is not None and (workers < 1 or args.nodes != 1 or not (args.storage and args.etcd)):
        raise SystemExit("--workers N needs N >= 1, --storage (MariaDB) and --etcd, and no --nodes")
    fresh_prefix = None
    if args.storage and not os.environ.get("TJOBS_STORAGE__DATABASE_PREFIX"):
        fresh_prefix = f"tjbench_{secrets.token_hex(3)}"
    node_settings = {**(settings or {}), **({"storage": {"database_prefix": fresh_prefix}} if fresh_prefix else {})}
    if args.etcd:
        cluster = {"etcd_endpoints": [args.etcd], "name": f"bench-{secrets.token_hex(3)}"}
        node_settings = {**node_settings, "cluster": cluster}
    admin_key = "tja_bench_" + secrets.token_urlsafe(18)
    node_dir = getattr(args, "node_dir", None)
    serve_command: tuple[str, ...] = ("-m", "tjobs.cli.main", "serve")
    if workers is not None:
        serve_command = (*serve_command, "--workers", str(workers))
        metrics = {"metrics": {"listen": f"127.0.0.1:{free_port_range(workers)}"}}  # worker i on the port + i
        node_settings = {**node_settings, **metrics}
    try:
        with contextlib.ExitStack() as stack:
            nodes = []
            for index in range(args.nodes):
                work_dir = None
                if node_dir:
                    work_dir = Path(node_dir) if args.nodes == 1 else Path(node_dir) / f"node-{index + 1}"
                node = stack.enter_context(
                    node_process(
                        storage_urls=args.storage or None,
                        topology=args.topology,
                        admin_key=admin_key,
                        settings=node_settings,
                        work_dir=work_dir,
                        serve_command=serve_command,
                    )
                )
                console.print(f"node {node.pid} on {node.base_url} (log: {node.log_path})")
                nodes.append(node)
            if workers is not None:
                wait_for_workers(nodes[0].base_url, admin_key, workers)
                pids = (nodes[0].pid, *children_of(nodes[0].pid))
                console.print(f"supervisor {nodes[0].pid}, workers {', '.join(map(str, pids[1:]))}")
                yield nodes[0].base_url, admin_key, pids
                return
            if args.etcd:
                wait_for_shares([node.base_url for node in nodes], admin_key)
            yield nodes[0].base_url, admin_key, tuple(node.pid for node in nodes)
    finally:
        if fresh_prefix:
            drop_databases(StorageSettings(urls=args.storage, database_prefix=fresh_prefix))


def wait_for_shares(base_urls: Sequence[str], admin_key: str, timeout_s: float = 180.0) -> None:
    """Wait until a cluster's nodes agree on one plan whose every group is held by its primary, and
    each node fires its part of the jobs (none twice, none left out)."""
    import httpx

    deadline = time.monotonic() + timeout_s
    seen: list[dict[str, Any]] = []
    with httpx.Client(headers={"authorization": f"Bearer {admin_key}"}, timeout=5.0) as client:
        while time.monotonic() < deadline:
            seen = [client.get(f"{url}/v1/cluster").json() for url in base_urls]
            plans = {view.get("plan_version") for view in seen}
            groups = seen[0].get("groups") or []
            jobs = [set(view["jobs"]) for view in seen]
            placed = sum(group["shards"] for group in groups)
            if (
                len(plans) == 1
                and None not in plans
                and all(len(view["nodes"]) == len(base_urls) for view in seen)
                and all(group["holder"] == group["primary"] for group in groups)
                and all(jobs)
                and sum(len(own) for own in jobs) == len(set().union(*jobs)) == placed
            ):
                return
            time.sleep(0.5)
    raise SystemExit(f"the {len(base_urls)} nodes did not settle on a plan in {timeout_s:.0f} s: {seen}")


def wait_for_workers(base_url: str, admin_key: str, workers: int, timeout_s: float = 180.0) -> None:
    """Wait until the workers of one ``tjobs serve --workers`` behind ``base_url`` are the cluster's members,
    its plan placed over them and every group held by its primary, as the worker answering sees it (each
    view on a new connection, from whichever worker accepts it; its own jobs taken)."""
    import httpx

    deadline = time.monotonic() + timeout_s
    view: dict[str, Any] = {}
    headers = {"authorization": f"Bearer {admin_key}"}
    while time.monotonic() < deadline:
        with httpx.Client(headers=headers, timeout=5.0) as client:
            view = client.get(f"{base_url}/v1/cluster").json()
        groups = view.get("groups") or []
        if (
            view.get("plan_version") is not None
            and len(view["nodes"]) == workers
            and len({group["holder"] for group in groups}) == workers
            and all(group["holder"] == group["primary"] for group in groups)
            and view["jobs"]
        ):
            return
        time.sleep(0.5)
    raise SystemExit(f"the {workers} workers did not settle on a plan in {timeout_s:.0f} s: {view}")


def children_of(pid: int) -> tuple[int, ...]:
    """The pids of process ``pid``'s children (Linux ``/proc``; none where it cannot be read)."""
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as children:
            return tuple(int(child) for child in children.read().split())
    except OSError:
        return ()


def target_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--url", help="a running node's base URL")
    parser.add_argument("--admin-key", help="its admin key (with --url)")
    parser.add_argument("--embedded", action="store_true", help="start an embedded (SQLite) node for the run")
    parser.add_argument("--storage", action="append", help="start a node on these storage URLs for the run")
    parser.add_argument("--topology", help="shard topology of a started node")
    parser.add_argument("--nodes", type=int, default=1, help="start this many nodes, a cluster (with --etcd)")
    parser.add_argument(
        "--workers",
        type=int,
        help="start one `tjobs serve --workers N` (with --storage and --etcd): N workers behind one URL",
    )
    parser.add_argument("--etcd", help="etcd endpoint: started nodes form a cluster through it (with --storage)")
    parser.add_argument(
        "--node-dir", help="keep a started node's work directory (its log, node.log) here (--nodes N: DIR/node-<i>)"
    )
    parser.add_argument("--json", dest="json_out", action="store_true", help="print one JSON object on stdout")
