"""Which cluster rig each ``tests/cluster`` module uses, and where each rig's services are.

The tests kill, freeze and cut off the rig's servers, so the tests of one rig run on one xdist worker
(tests/conftest.py groups them by :func:`rig_group`). With one rig, every cluster test is in that one group,
one after the other; a second rig (``TJOBS_TEST_CLUSTER2_DIR`` set: scripts/test.sh does, with ports of its
own) lets two workers run cluster tests at once, each faulting only its own servers.

The assignment is fixed, by module (a test module's tests and its module-scoped fixtures stay on one rig):
:data:`RIG_2_MODULES` go to rig 2, every other module to rig 1. It balances the default run's two parts
(seconds of test calls in a CI run's durations; calls under 15 s were not listed there, counted as 15):

* the ``timing`` part: rig 2 has test_etcd_outage (61) and test_hot_tier (15), rig 1 test_failover (27) and
  test_partitions (51);
* the parallel part: rig 2 has test_clock_skew_processes (105, 5 tests), test_rolling_upgrade (71, and its
  module fixture checks out the previous release) and test_hot_tier (16), about 190; rig 1 test_failover
  (83, 3 tests), test_pools (45), test_job_runs_failover (21), test_cluster_slo (18),
  test_job_runs_across_nodes (15) and test_child_tasks_failover (50, 3 tests; measured alone, not in a CI
  run), about 230.

Rig 1: ``TJOBS_TEST_CLUSTER_DIR`` (``/tmp/tjobs-cluster-tests``), ``TJOBS_TEST_CLUSTER_MYSQL_PORTS``
("3307 3308"), ``TJOBS_TEST_CLUSTER_ETCD_PORT`` (23795), ``TJOBS_TEST_CLUSTER_REDIS_PORT`` (6395).
Rig 2: the same names with ``CLUSTER2`` (``TJOBS_TEST_CLUSTER2_DIR`` and so on), with no defaults: without
``TJOBS_TEST_CLUSTER2_DIR`` there is no rig 2 and its modules use rig 1.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

RIG_2_MODULES = frozenset({"test_etcd_outage", "test_hot_tier", "test_clock_skew_processes", "test_rolling_upgrade"})
GROUPS = {1: "cluster-rig", 2: "cluster-rig-2"}


def rig_of(module_path: str | os.PathLike[str]) -> int:
    """The rig (1 or 2) of the tests in the module at ``module_path`` (by its file name)."""
    if os.environ.get("TJOBS_TEST_CLUSTER2_DIR") and Path(module_path).stem in RIG_2_MODULES:
        return 2
    return 1


def rig_group(module_path: str | os.PathLike[str]) -> str:
    """The xdist group of the tests of that module that use the rig."""
    return GROUPS[rig_of(module_path)]


@dataclass(frozen=True)
class RigPlace:
    state_dir: Path
    mysql_ports: str
    etcd_port: int
    redis_port: int


def rig_place(rig: int) -> RigPlace:
    """Rig ``rig``'s state directory and ports, from the environment."""
    if rig == 1:
        return RigPlace(
            Path(os.environ.get("TJOBS_TEST_CLUSTER_DIR", "/tmp/tjobs-cluster-tests")),
            os.environ.get("TJOBS_TEST_CLUSTER_MYSQL_PORTS", "3307 3308"),
            int(os.environ.get("TJOBS_TEST_CLUSTER_ETCD_PORT", "23795")),
            int(os.environ.get("TJOBS_TEST_CLUSTER_REDIS_PORT", "6395")),
        )
    names = ("DIR", "MYSQL_PORTS", "ETCD_PORT", "REDIS_PORT")
    missing = [f"TJOBS_TEST_CLUSTER2_{name}" for name in names if not os.environ.get(f"TJOBS_TEST_CLUSTER2_{name}")]
    if missing:
        raise RuntimeError(f"the second cluster rig needs {', '.join(missing)} (scripts/test.sh sets them)")
    return RigPlace(
        Path(os.environ["TJOBS_TEST_CLUSTER2_DIR"]),
        os.environ["TJOBS_TEST_CLUSTER2_MYSQL_PORTS"],
        int(os.environ["TJOBS_TEST_CLUSTER2_ETCD_PORT"]),
        int(os.environ["TJOBS_TEST_CLUSTER2_REDIS_PORT"]),
    )
