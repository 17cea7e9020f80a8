"""The ``tjobs`` command, assembled in :mod:`tjobs.cli.main`:

- on this node's settings: ``dev``, ``serve``, ``migrate`` (:mod:`~tjobs.cli.main`) and ``shards
  status|reseed|plan|move|rebalance|drop-old`` (:mod:`~tjobs.cli.shards`: the shard map);
- over the API with the SDK: ``task``, ``app``, ``import`` (:mod:`~tjobs.cli.api_commands`), ``dlq`` (dead
  letters, their redrive and redrive jobs: :mod:`~tjobs.cli.dead_letter_commands`),
  ``app list|disable|enable|delete`` (:mod:`~tjobs.cli.app_admin_commands`, admin key), ``target``
  (:mod:`~tjobs.cli.target_commands`), ``schedule preview`` (:mod:`~tjobs.cli.schedule_commands`),
  ``flows search`` and ``task search`` (:mod:`~tjobs.cli.search_commands`) and ``slo``
  (:mod:`~tjobs.cli.slo_commands`).

Benchmarks are not commands of the product: ``python -m benchmarks <name>`` in a checkout.
"""
