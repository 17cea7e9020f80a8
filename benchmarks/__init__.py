"""The benchmarks: run from the repository root as ``python -m benchmarks <name> [options]`` (or
``python -m benchmarks.<name>``); ``python -m benchmarks`` lists them. They are not part of the installed
package: the product never imports them, and the tests import nothing from them (the harness both use,
a node subprocess, a cluster rig and a callback sink, is :mod:`testkit`). Their own tests are in
``benchmarks/tests``. Figures and their history: ``docs/benchmarks.md``; see ``benchmarks/README.md``.
"""
