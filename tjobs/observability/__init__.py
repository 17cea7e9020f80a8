"""What a node tells its operators: Prometheus metrics, per-app service levels and log configuration.

- :mod:`tjobs.observability.metrics` — the node's Prometheus families (``tjobs_`` prefix).
- :mod:`tjobs.observability.metrics_per_app` — per-fire figures per app, turned into families at scrape.
- :mod:`tjobs.observability.slo` — per-app service levels for ``GET /v1/slo`` and ``/v1/stats``.
- :mod:`tjobs.observability.logs` — the only place log handlers are configured.
"""
