"""The coordination contract: which jobs (shards) this node runs, whether it may fire now, and the
executor pools' registry (:mod:`tjobs.pools`), which lives beside membership for the same reason
membership does: it is cluster-wide, leased, and costs no database write.

The coordinator also keeps the shard map (:mod:`sharding.shard_map`): which server holds each logical
database, under an epoch that grows with every change.

Implementations: :class:`tjobs.cluster.local.LocalCoordinator` (embedded: one node owns every job; the
in-memory twin) and :class:`tjobs.cluster.etcd.EtcdCoordinator` (a cluster on etcd). One suite,
``tests/contract/test_coordinator_contract.py``, runs this contract over both.
"""

from __future__ import annotations

import enum
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Final, Literal

from sharding.shard_map import ShardMap
from tjobs.cluster.limit_shares import SOLE_NODE, Membership
from tjobs.pools.model import Executor, ExecutorLease

ShardMapListener = Callable[[ShardMap], Awaitable[None]]
"""Takes a shard map newer than any handed before (:meth:`Coordinator.watch_shard_map`)."""


class _RenewLater(enum.Enum):
    LATER = "later"


RENEW_LATER: Final = _RenewLater.LATER
"""What :meth:`Coordinator.renew_executor_now` answers when only :meth:`Coordinator.renew_executor` can
tell (it would have to renew the lease on the registry's store, or read the executor)."""

RenewLater = Literal[_RenewLater.LATER]
RenewNow = Executor | None | RenewLater

OwnershipListener = Callable[[frozenset[int]], Awaitable[None]]
"""Takes the jobs this node owns now (the whole set, not a difference). Raising means "not taken"
(a load failed): the coordinator hands the set again at its next sync."""


class Coordinator(ABC):
    """Grants this node a set of jobs. Ownership is for liveness only; correctness comes from the
    fire transaction's compare-and-set (invariant 6, docs/design.md), so a brief overlap is safe and a gap is not.

    The listener's hand-overs, the one rule every method below relies on:

    - the listener is called only with a set that differs from the last set it took; before the
      first hand-over it is taken to hold the empty set, so it is never handed an empty set first;
    - a listener that raises has not taken the set: the error is logged, never raised out of the
      coordinator, and the coordinator's current set is handed again at its next sync (every
      ``sync_interval_ms``), even when that set has not changed, until a hand-over returns.

    Between coordinators of one cluster: once every live node's hand-overs have settled, each job
    is owned by exactly one of them (none twice, none unowned). One node alone owns every job.
    """

    @abstractmethod
    async def start(self, on_change: OwnershipListener) -> None:
        """Join, then hand ``on_change`` the owned jobs as soon as they are known and on every change
        after. The embedded coordinator hands every job before returning; a cluster node hands its
        share from its sync once the plan gives it one. A listener's error never escapes ``start``."""

    @abstractmethod
    async def stop(self) -> None:
        """Hand the jobs off (resign) so a successor takes over without waiting for a lease to end.

        Hands the listener the empty set before returning (unless it already holds it); afterwards
        ``owned_jobs()`` is empty and ``may_fire`` is false. A listener that raises on that last
        hand-over does not stop the resignation: its error is logged, not raised."""

    @abstractmethod
    def owned_jobs(self) -> frozenset[int]:
        """The jobs this node owns now: the set last handed to the listener, or being handed, or
        (after a hand-over raised) waiting to be handed again. Empty before start and after stop."""

    @abstractmethod
    def may_fire(self, now_ms: int) -> bool:
        """Whether this node may commit fires now: it owns jobs (``owned_jobs()`` is not empty) and is
        not fenced (``describe()["fenced"] is None``). A cluster node is fenced once its lease deadline
        has passed, its database is unreachable or its clock is off (self-fencing): it must stop firing
        before a successor can start. False before start and after stop."""

    @abstractmethod
    def describe(self) -> dict[str, object]:
        """A JSON-able view for ``/v1/cluster`` and the cluster metrics. Every
        implementation returns at least:

        - ``mode``: ``"embedded"`` or ``"cluster"``;
        - ``node``: this node's id;
        - ``nodes``: the members this node sees, each ``{"id": str, "healthy": bool, ...}`` (embedded:
          only itself);
        - ``owned_jobs``: ``len(owned_jobs())``;
        - ``fenced``: ``None``, or why this node may not fire even while owning jobs (cluster:
          ``"lease"``, ``"database"``, ``"clock"``);

        and ``database_servers`` (:meth:`tjobs.cluster.db_health.DatabaseHealth.describe`) when it
        was given the node's database health. A cluster coordinator adds its plan, groups, leader,
        lease and sync figures (:meth:`tjobs.cluster.etcd.EtcdCoordinator.describe`)."""

    def membership(self) -> Membership:
        """The live node count and this node's rank among them (by node id) as this node last read
        them, without waiting: the API's per-app limits take ``1 / nodes`` of each limit on every
        node (:mod:`tjobs.cluster.limit_shares`), so it is read per request. A cluster coordinator
        re-reads it at every sync; this default (one node alone) has every limit whole."""
        return SOLE_NODE

    # ---- the shard map ------------------------------------------------------------------------------
    #
    # The map is shared by every node of the cluster (etcd; the embedded mode: the store's record) and
    # outlives them. These calls work before ``start`` and after ``stop``; a storage outage raises.

    @abstractmethod
    async def read_shard_map(self) -> ShardMap | None:
        """The stored map, ``None`` before one was seeded."""

    @abstractmethod
    async def seed_shard_map(self, seed: ShardMap) -> ShardMap:
        """Store ``seed`` unless a map is stored already, atomically (of two nodes seeding at once,
        one wins and both get its map); return the stored map: ``seed`` or the one found."""

    @abstractmethod
    async def replace_shard_map(self, new: ShardMap, expected_epoch: int) -> bool:
        """Store ``new`` only if the stored map is still at ``expected_epoch`` and ``new.epoch`` is
        greater (a compare-and-set: of two writers from one epoch, one wins); whether it was stored."""

    @abstractmethod
    def watch_shard_map(self, listener: ShardMapListener) -> None:
        """From ``start`` on, hand ``listener`` every stored map newer than the last one it took,
        within a sync interval or so of its storing (intermediate epochs may be skipped, an epoch is
        never handed twice, never an older one). Call before ``start``. A listener that raises is
        logged and handed the newest map again at the next sync."""

    # ---- executor pools ------------------------------------------------------------------------------
    #
    # An app's executors register into its named pools (tjobs.pools). Between start and stop, on every
    # node of a cluster alike:
    #
    # - a registration is a TTL lease of ``executor.ttl_s``; :meth:`renew_executor` (a heartbeat)
    #   restarts it; an executor not renewed for its TTL is out: gone from :meth:`pool_executors` and
    #   :meth:`live_executors` within 2 x TTL (within TTL + one pool sync in practice);
    # - registering is idempotent per ``(app, pool, executor id)``: registering again renews the lease
    #   and replaces what changed (address, zone, weight, capacity, TTL), never adds a second executor;
    # - apps are apart: an app's calls name only its own pools and never see another app's executors;
    # - renewing and reading write nothing to the database; a heartbeat is at most one lease renewal
    #   on the cluster's store (etcd) and none in the embedded mode.

    @abstractmethod
    async def register_executor(self, app_id: str, pool: str, executor: Executor) -> bool:
        """Register (or re-register) ``executor`` into ``pool`` of ``app_id`` and start its lease;
        ``True`` if it was not registered before. Seen by :meth:`pool_executors` on any node at once,
        and by :meth:`live_executors` on every node within a pool sync."""

    @abstractmethod
    async def renew_executor(self, app_id: str, pool: str, executor_id: str) -> Executor | None:
        """Restart the executor's lease; ``None`` if it is not registered (never was, deregistered, or
        its lease ended): it must register again."""

    def renew_executor_now(self, app_id: str, pool: str, executor_id: str) -> RenewNow:
        """:meth:`renew_executor` when it needs no I/O, answered at once with what it would answer (and
        with the same effect: the executor stays live as long); :data:`RENEW_LATER` otherwise (then call
        :meth:`renew_executor`). A heartbeat's fast path; this default never answers at once."""
        return RENEW_LATER

    @abstractmethod
    async def deregister_executor(self, app_id: str, pool: str, executor_id: str) -> bool:
        """Remove the executor at once; ``False`` if it was not registered."""

    @abstractmethod
    async def pool_executors(self, app_id: str, pool: str) -> list[Executor]:
        """The live executors of one pool as the registry holds them now (a read), by id."""

    @abstractmethod
    async def app_pools(self, app_id: str) -> dict[str, list[Executor]]:
        """Every pool of ``app_id`` that has a live executor, with its live executors (a read)."""

    @abstractmethod
    def live_executors(self, app_id: str, pool: str) -> tuple[Executor, ...]:
        """The pool's live executors as this node last saw them, by id, without waiting (delivery asks
        this per attempt). It may lag the registry by one pool sync (``cluster.pool_sync_interval_ms``)."""

    @abstractmethod
    async def pool_leases(self, app_id: str, pool: str | None = None) -> dict[str, list[ExecutorLease]]:
        """Every pool of ``app_id`` that has a live executor (or only ``pool``, when it has one), with its
        live executors by id, each with its lease as the registry holds it now (a read, like
        :meth:`app_pools`): ``lease_left_ms`` until it is out without another heartbeat (to the second in
        a cluster), ``heartbeat_age_ms`` since its last heartbeat known here. Embedded, every heartbeat
        renews the lease, so the age is exact; in a cluster it is the newer of the lease's last renewal
        (any node) and the last heartbeat this node answered: a heartbeat answered by another node
        without renewing (:meth:`renew_executor_now`) is not seen, so the age may be up to the lease
        (2 x TTL - 1 s) minus half a TTL older than the truth, never younger."""

    # ---- nodes' runtime figures ------------------------------------------------------------------------
    #
    # Each node publishes a small JSON record of its own runtime figures (wheel, backlogs, lag, pools'
    # in-flight counts) every few seconds (tjobs.service.node_figures); any node reads every live node's.

    @abstractmethod
    async def publish_node_figures(self, figures: Mapping[str, Any]) -> None:
        """Store this node's record (JSON-able), replacing its previous one. A cluster keeps it only
        while the node is a member (on its lease): a node that is gone has no record, and a node that
        is not a member now (a lost lease) stores nothing. A storage outage raises."""

    @abstractmethod
    async def node_figures(self) -> dict[str, dict[str, Any]]:
        """The last record each live node published, by node id (a read)."""
