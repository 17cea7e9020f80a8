"""The node a bench drives, and the command-line options that choose it (``--url``, ``--embedded``,
``--storage``, ``--topology``, ``--json``): shared by ``python -m benchmarks fire`` / ``register`` and
the benches that drive a node the same way (:mod:`benchmarks.protocol_fire`)."""

from __future__ import annotations

import argparse
import contextlib
import os
import secrets
from collections.abc import Iterator, Mapping
from typing import Any

from rich.console import Console

console = Console(stderr=True)


@contextlib.contextmanager
def bench_target(
    args: argparse.Namespace, settings: Mapping[str, Any] | None = None
) -> Iterator[tuple[str, str, int | None]]:
    """The node a bench drives: a running one (--url), or one started for the run and stopped after
    (then its pid comes too, for the node's CPU figures). A node started on ``--storage`` gets a fresh
    ``tjbench_<hex>`` database prefix, dropped afterwards, unless ``TJOBS_STORAGE__DATABASE_PREFIX``
    names one: a run never writes into the default ``tjobs_*`` databases, and runs do not pile up
    databases on the server (thousands of leftover tables slowed MariaDB enough to add seconds of
    lateness to later runs). ``settings`` go to a started node (``targets.allowed_addresses``, ...)."""
    from tjobs.settings import StorageSettings
    from tjobs.testing.databases import drop_databases
    from tjobs.testing.node_process import node_process

    if args.url:
        if not args.admin_key:
            raise SystemExit("--admin-key is required with --url")
        yield args.url, args.admin_key, None
        return
    if not args.embedded and not args.storage:
        raise SystemExit("give --url, --embedded or --storage")
    fresh_prefix = None
    if args.storage and not os.environ.get("TJOBS_STORAGE__DATABASE_PREFIX"):
        fresh_prefix = f"tjbench_{secrets.token_hex(3)}"
    node_settings = {**(settings or {}), **({"storage": {"database_prefix": fresh_prefix}} if fresh_prefix else {})}
    try:
        with node_process(storage_urls=args.storage or None, topology=args.topology, settings=node_settings) as node:
            console.print(f"node {node.pid} on {node.base_url} (log: {node.log_path})")
            yield node.base_url, node.admin_key, node.pid
    finally:
        if fresh_prefix:
            drop_databases(StorageSettings(urls=args.storage, database_prefix=fresh_prefix))


def target_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--url", help="a running node's base URL")
    parser.add_argument("--admin-key", help="its admin key (with --url)")
    parser.add_argument("--embedded", action="store_true", help="start an embedded (SQLite) node for the run")
    parser.add_argument("--storage", action="append", help="start a node on these storage URLs for the run")
    parser.add_argument("--topology", help="shard topology of a started node")
    parser.add_argument("--json", dest="json_out", action="store_true", help="print one JSON object on stdout")
