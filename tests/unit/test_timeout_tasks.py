"""tests/timeout_tasks.py: a test that pytest-timeout ends while its event loop waits names the coroutine
that waits (pytest-timeout's own thread dump shows only the loop's ``selector.poll``)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

HANGING = """
import asyncio

import pytest


async def waits_for_a_set_that_never_comes(event: asyncio.Event) -> None:
    await event.wait()


@pytest.mark.timeout(2)
async def test_hangs() -> None:
    event = asyncio.Event()
    helper = asyncio.create_task(waits_for_a_set_that_never_comes(event), name="the-helper")
    await helper
"""


@pytest.mark.parametrize("method", ["signal", "thread"])
def test_a_timed_out_test_prints_its_tasks_await_chains(tmp_path: Path, method: str) -> None:
    (tmp_path / "conftest.py").write_text(
        "from tests.timeout_tasks import pytest_timeout_cancel_timer, pytest_timeout_set_timer  # noqa: F401\n"
    )
    (tmp_path / "test_hanging.py").write_text(HANGING)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-p",
            "no:cacheprovider",
            "-p",
            "no:xdist",
            "-q",
            "-o",
            "asyncio_mode=auto",
            f"--timeout-method={method}",
            "--rootdir",
            str(tmp_path),
            str(tmp_path / "test_hanging.py"),
        ],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
        env=env,
    )
    output = result.stdout + result.stderr
    assert result.returncode != 0, output
    assert "asyncio tasks" in output, output
    assert "--- task the-helper (waits_for_a_set_that_never_comes" in output, output
    assert "awaits: Event.wait at" in output, output  # the chain reaches the await that has no deadline
    assert "test_hanging.py" in output, output
