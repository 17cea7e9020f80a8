"""Benchmarks the ``tjobs bench`` command runs.

``fire`` (registration + fire path over HTTP, with a callback sink in its own process), ``sink``,
``report`` (percentiles, accounting, JSON and table) and ``node_process`` (a node subprocess for
``--embedded`` / ``--storage``). Submodules are imported on demand so that one benchmark does not pull in
another's dependencies.
"""
