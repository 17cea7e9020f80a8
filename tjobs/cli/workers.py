"""``tjobs serve --workers N``: one deployment on N cores of one box.

A node runs on one core (one asyncio loop). ``--workers N`` starts a supervisor (:mod:`tjobs.cli.supervisor`)
that runs N node processes, the workers, each a full member of the cluster: its own node id, its own etcd
lease, its share of the job groups as primary or backup, its own hand-off on SIGTERM. They coordinate
exactly as N nodes on N boxes would, which is why they need etcd and a database server: the embedded
coordination lives inside one process, and SQLite files (or the in-memory store) are one process's.

This module decides what follows from the settings alone, before anything is started:

* whether they allow N workers (:func:`workers_problem`: one line naming the setting, or ``None``);
* what makes worker ``i`` its own member (:func:`worker_settings`): node id ``<node id>-w<i>`` (the node
  id is ``node_id``, else ``<host name>-<api.port>``), and ``/metrics`` on ``metrics.listen``'s port + ``i``,
  so that Prometheus scrapes each worker at an address of its own.

The API's port is one listening socket, opened by the supervisor and inherited by every worker: the
kernel hands each new connection to one of the workers accepting on it, so clients and balancers see
one address, and a connection waiting in the socket's queue is not lost when a worker dies.
"""

from __future__ import annotations

from tjobs.settings import Settings

READY_LINE = b"ready\n"
"""What a worker writes to the pipe of ``--ready-fd`` once it serves."""

EMBEDDED_STORES = ("sqlite", "memory:")
"""How the URLs of stores that live inside one process start (``storage.urls``)."""


def worker_node_id(settings: Settings, index: int) -> str:
    """Worker ``index``'s node id: ``<node id>-w<index>``."""
    return f"{settings.node_identity()}-w{index}"


def worker_settings(settings: Settings, index: int) -> Settings:
    """The settings worker ``index`` runs with: its own node id and its own metrics port (``metrics.listen``'s
    port + ``index``; a port of 0 stays 0, each worker then listening on a port the system picks)."""
    metrics = settings.metrics
    listen = metrics.listen_address()
    if listen is not None and listen[1] != 0:
        host, port = listen
        shown = f"[{host}]" if ":" in host else host
        metrics = metrics.model_copy(update={"listen": f"{shown}:{port + index}"})
    return settings.model_copy(update={"node_id": worker_node_id(settings, index), "metrics": metrics})


def workers_problem(settings: Settings, workers: int) -> str | None:
    """Why ``tjobs serve --workers <workers>`` must not start with these settings (None: it may)."""
    if workers < 1:
        return f"--workers must be at least 1, got {workers}"
    if workers == 1:
        return None  # one supervised node: what a plain `tjobs serve` runs, restarted when it dies
    if not settings.cluster.etcd_endpoints:
        return (
            f"--workers {workers} needs cluster.etcd_endpoints: the embedded coordination lives inside one "
            "process and cannot share the job groups between workers (each would fire every task); "
            "set cluster.etcd_endpoints to an etcd the workers join"
        )
    embedded = [url for url in settings.storage.urls if url.startswith(EMBEDDED_STORES)]
    if embedded:
        return (
            f"--workers {workers} needs database servers in storage.urls, not {embedded[0]!r}: SQLite files and "
            "the in-memory store belong to one process; use MariaDB or MySQL"
        )
    return _metrics_problem(settings, workers)


def _metrics_problem(settings: Settings, workers: int) -> str | None:
    metrics, api = settings.metrics, settings.api
    if not metrics.enabled:
        return None
    listen = metrics.listen_address()
    if listen is None:
        return (
            f"--workers {workers} needs metrics.listen (worker i serves /metrics on its port + i) or "
            "metrics.enabled = false: on the API's port a scrape would read whichever worker accepted it"
        )
    host, first = listen
    if first == 0:
        return None
    last = first + workers - 1
    if last > 65_535:
        return f"metrics.listen ({metrics.listen}): {workers} workers need ports {first}..{last}, past 65535"
    if first <= api.port <= last and host in (api.host, "0.0.0.0", "::"):
        return (
            f"metrics.listen ({metrics.listen}): the workers' metrics ports {first}..{last} include the API's "
            f"port {api.port}: name a port outside it"
        )
    return None
