"""A configuration mistake refuses the start with one line naming the setting, never a traceback."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest


def _serve(config: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tjobs.cli.main", "serve", "--config", str(config)],
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.mark.parametrize(
    ("toml", "named"),
    [
        ("[scheduler]\ncycle_seconds = 5\n", "scheduler.cycle_seconds"),  # misspelled: cycle_s
        ("[cluster]\nlease_ttl_s = 1\n", "cluster.lease_ttl_s"),  # below its bound
        ("[api]\nport = 'eighty'\n", "api.port"),
        ("[nonsense]\nx = 1\n", "nonsense"),
    ],
)
def test_serve_refuses_a_bad_setting_naming_it(tmp_path: Path, toml: str, named: str) -> None:
    config = tmp_path / "tjobs.toml"
    config.write_text(toml)
    result = _serve(config)
    assert result.returncode == 2, result.stderr
    assert f"invalid configuration: {named}:" in result.stderr, result.stderr
    assert "Traceback" not in result.stderr and "╭" not in result.stderr, result.stderr


def test_serve_refuses_a_config_file_that_is_not_toml(tmp_path: Path) -> None:
    config = tmp_path / "tjobs.toml"
    config.write_text("[api\nport = 1\n")
    result = _serve(config)
    assert result.returncode == 2, result.stderr
    assert f"invalid configuration: {config}:" in result.stderr, result.stderr
    assert "Traceback" not in result.stderr and "╭" not in result.stderr, result.stderr
