"""Executor pools: an app's live service instances, registered by themselves, and how a fire picks them.

An **executor** is one instance of a business service that registered into a named **pool** of its app
(``POST /v1/pools/{pool}/executors``) and keeps a TTL lease alive by heartbeats. The registry lives on
the coordinator seam (:class:`tjobs.cluster.base.Coordinator`: in-process in the embedded mode, etcd
leases in a cluster), so a heartbeat costs no database write.

How a callback points at a pool is part of the callback's spec: :class:`tjobs.specs.pool.PoolRoute`
(with the names' rules). What is here is pure (no I/O, no clock: ``now_ms`` is passed in):

- :mod:`tjobs.pools.model` — an :class:`~tjobs.pools.model.Executor`;
- :mod:`tjobs.pools.selection` — ``one`` (round robin, consistent hash, least in flight),
  ``one_per_zone``, ``all``;
- :mod:`tjobs.pools.sharding` — ``sharded``: ``shard_total`` items over the live executors, even and
  stable;
- :mod:`tjobs.pools.breaker` — the per-executor circuit breaker;
- :mod:`tjobs.pools.overlap` — the bookkeeping of a route's overlap policy.

The delivery layer's :mod:`tjobs.delivery.pool_dispatcher` holds the per-node state these need
(round-robin positions, in-flight counts, breakers, the last shard assignment) and turns a pool
route into destinations for an attempt.
"""
