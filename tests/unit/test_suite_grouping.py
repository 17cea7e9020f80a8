"""The default run spreads tests over xdist workers (scripts/test.sh), and tests/conftest.py keeps the tests of
one rig whose servers they kill on one worker: if the grouping stopped reaching xdist (as it did under pytest
9.2, which dropped the ``Node._nodeid`` xdist 3.8 sets), two workers would start and kill the same servers."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

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


def test_the_tests_of_one_rig_run_on_one_xdist_worker(tmp_path: Path) -> None:
    (tmp_path / "test_probe.py").write_text(PROBE)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "tests.conftest", "-n", "3",
         "--dist", "loadgroup", "-v", "--rootdir", str(tmp_path), str(tmp_path / "test_probe.py")],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    workers: dict[str, set[str]] = {"rig": set(), "free": set()}
    for worker, name in re.findall(r"\[(gw\d+)\] \[ *\d+%\] PASSED \S+::test_(on_the_rig|free)", run.stdout):
        workers["rig" if name == "on_the_rig" else "free"].add(worker)
    assert len(workers["rig"]) == 1, (workers, run.stdout[-2000:])
    assert workers["free"], run.stdout[-2000:]
