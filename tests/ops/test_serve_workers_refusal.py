"""``tjobs serve --workers N`` refuses what cannot work with one line naming the setting (exit code 2, no
traceback), before it loads the node or the API and before it listens (tjobs/cli/workers.py)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

BASE = '[api]\nadmin_key = "tja_workers_refusal_admin_key_0123"\n'
CLUSTER = '[cluster]\netcd_endpoints = ["http://127.0.0.1:1"]\n'
SERVERS = '[storage]\nurls = ["mysql+asyncmy://root@127.0.0.1:1"]\n'
METRICS_ON_THE_API_PORT = '[metrics]\nscrape_token = "Zx81kLmq0oPw7rTy"\n'
NO_METRICS = "[metrics]\nenabled = false\n"


@pytest.mark.parametrize(
    ("toml", "workers", "named"),
    [
        (BASE + NO_METRICS, "0", "--workers must be at least 1, got 0"),
        (BASE + NO_METRICS + SERVERS, "2", "--workers 2 needs cluster.etcd_endpoints:"),
        (BASE + NO_METRICS + CLUSTER, "2", "--workers 2 needs database servers in storage.urls, not 'sqlite"),
        (BASE + METRICS_ON_THE_API_PORT + CLUSTER + SERVERS, "2", "--workers 2 needs metrics.listen"),
    ],
)
def test_serve_refuses_workers_that_cannot_work_naming_the_setting(
    tmp_path: Path, toml: str, workers: str, named: str
) -> None:
    config = tmp_path / "tjobs.toml"
    config.write_text(toml)
    command = ["serve", "--config", str(config), "--workers", workers]
    result = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "tjobs.cli.main", *command],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2, result.stderr[-2000:]
    said = [line for line in result.stderr.splitlines() if not line.startswith("import time:")]
    assert len(said) == 1 and said[0].startswith(f"refusing to start: {named}"), said
    loaded = {line.rsplit("|", 1)[-1].strip() for line in result.stderr.splitlines() if line.startswith("import time:")}
    assert not {"tjobs.api.app", "tjobs.console", "tjobs.node", "tjobs.cli.supervisor"} & loaded
