"""The default run spreads tests over xdist workers (scripts/test.sh), and tests/conftest.py keeps the tests of
one rig whose servers they kill on one worker: if the grouping stopped reaching xdist (as it did under pytest
9.2, which dropped the ``Node._nodeid`` xdist 3.8 sets), two workers would start and kill the same servers.
tests/cluster may have two rigs (tests/cluster/rigs.py): each module's tests on its own rig's worker."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from tests.cluster.rigs import RIG_2_MODULES

ROOT = Path(__file__).resolve().parents[2]
PROBE = """
import pytest

@pytest.fixture
def infra() -> int:
    return 1

@pytest.mark.parametrize("i", range(8))
def test_on_the_rig(infra: int, i: int) -> None:
    pass

@pytest.mark.parametrize("i", range(8))
def test_free(i: int) -> None:
    pass
"""
RIG_2_MODULE = sorted(RIG_2_MODULES)[0]  # a module tests/cluster/rigs.py puts on the second rig
PASSED = re.compile(r"\[(gw\d+)\] \[ *\d+%\] PASSED (\w+)\.py::test_(on_the_rig|free)\[\d+\](?:@([\w-]+))?")


def _run_probe(tmp_path: Path, env: dict[str, str]) -> dict[str, dict[str, set[str]]]:
    """Run the probe module as ``test_probe.py`` (a rig-1 module) and as ``RIG_2_MODULE`` on 3 workers; for
    each module's tests on the rig and for the free ones: the workers they ran on and their xdist groups."""
    for module in ("test_probe", RIG_2_MODULE):
        (tmp_path / f"{module}.py").write_text(PROBE)
    # The session loads xdist and tests/conftest.py, the two that deal the probe's tests, and no other installed
    # plugin: importing those (schemathesis, hypothesis, ...) was ~1 s of CPU in each of its four processes.
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "xdist.plugin", "-p", "no:cacheprovider", "-p", "tests.conftest",
         "-n", "3", "--dist", "loadgroup", "-v", "--rootdir", str(tmp_path), str(tmp_path)],
        cwd=tmp_path, env={**env, "PYTHONPATH": str(ROOT), "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"},
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    seen: dict[str, dict[str, set[str]]] = {}
    for worker, module, name, group in PASSED.findall(run.stdout):
        key = f"{module}:{'rig' if name == 'on_the_rig' else 'free'}"
        seen.setdefault(key, {"workers": set(), "groups": set()})
        seen[key]["workers"].add(worker)
        seen[key]["groups"].add(group)
    assert len(PASSED.findall(run.stdout)) == 32, run.stdout[-3000:]
    return seen


def _without_rig_settings() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith(("TJOBS_TEST_CLUSTER", "TJOBS_TEST_CHAOS"))}


def test_the_tests_of_one_rig_run_on_one_xdist_worker(tmp_path: Path) -> None:
    seen = _run_probe(tmp_path, _without_rig_settings())
    rig_modules = [seen[f"{module}:rig"] for module in ("test_probe", RIG_2_MODULE)]
    assert len(set().union(*(found["workers"] for found in rig_modules))) == 1, seen
    assert set().union(*(found["groups"] for found in rig_modules)) == {"cluster-rig"}, seen
    assert seen["test_probe:free"]["workers"], seen


def test_with_a_second_cluster_rig_each_rigs_tests_run_on_one_xdist_worker_of_their_own_group(tmp_path: Path) -> None:
    env = {**_without_rig_settings(), "TJOBS_TEST_CLUSTER2_DIR": str(tmp_path / "rig-2")}
    seen = _run_probe(tmp_path, env)
    assert seen["test_probe:rig"]["groups"] == {"cluster-rig"}, seen
    assert seen[f"{RIG_2_MODULE}:rig"]["groups"] == {"cluster-rig-2"}, seen
    assert len(seen["test_probe:rig"]["workers"]) == 1, seen
    assert len(seen[f"{RIG_2_MODULE}:rig"]["workers"]) == 1, seen
    assert seen["test_probe:free"]["groups"] == {""}, seen
