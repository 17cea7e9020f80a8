"""A configuration mistake refuses the start with one line naming the setting, never a traceback."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tjobs.settings import InvalidSettings, load_settings


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
        ("[scheduler]\ncycle_s = 10\nload_lead_s = 10\n", "scheduler.load_lead_s"),  # not below cycle_s
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


@pytest.mark.parametrize(("cycle_s", "load_lead_s"), [(10, 10), (10, 11), (5, None)])  # None: default 30
def test_a_load_lead_not_below_the_cycle_is_refused_naming_it(cycle_s: int, load_lead_s: int | None) -> None:
    # The cycle load skips what it loaded before, which needs the next load to start after the
    # current horizon: cycle_s > load_lead_s (tjobs/firing/runner.py, invariant 7 in docs/design.md).
    scheduler = {"cycle_s": cycle_s} if load_lead_s is None else {"cycle_s": cycle_s, "load_lead_s": load_lead_s}
    with pytest.raises(InvalidSettings, match=r"^scheduler\.load_lead_s: .*below scheduler\.cycle_s"):
        load_settings(scheduler=scheduler)


def test_a_load_lead_below_the_cycle_is_accepted() -> None:
    assert load_settings(scheduler={"cycle_s": 10, "load_lead_s": 3}).scheduler.load_lead_s == 3
    assert load_settings().scheduler.load_lead_s == 30


def _dev(data_dir: Path, **env: str) -> subprocess.CompletedProcess[str]:
    import os

    return subprocess.run(
        [sys.executable, "-m", "tjobs.cli.main", "dev", "--port", "0", "--data-dir", str(data_dir), "--no-demo"],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, **env},
    )


@pytest.mark.parametrize("topology", ["3x3", "0x1x1", "8x4x16x2", "axbxc"])
def test_dev_refuses_a_wrong_topology_with_one_line_and_no_traceback(tmp_path: Path, topology: str) -> None:
    result = _dev(tmp_path / "dev", TJOBS_STORAGE__TOPOLOGY=topology)
    assert result.returncode == 2, result.stderr
    assert "invalid configuration: storage.topology:" in result.stderr, result.stderr
    assert "Traceback" not in result.stderr and "╭" not in result.stderr, result.stderr


def test_dev_and_serve_refuse_data_written_with_another_topology_with_one_line(tmp_path: Path) -> None:
    data_dir = tmp_path / "dev"
    config = tmp_path / "tjobs.toml"
    config.write_text(
        f'[storage]\nurls = ["sqlite+aiosqlite:///{data_dir / "data"}"]\ntopology = "1x1x2"\n'
        '[api]\nadmin_key = "tja_settings_refusal_admin_key_0123456789"\n[metrics]\nenabled = false\n'
    )
    data_dir.mkdir()
    migrated = subprocess.run(
        [sys.executable, "-m", "tjobs.cli.main", "migrate", "--config", str(config)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert migrated.returncode == 0, migrated.stderr
    config.write_text(config.read_text().replace("1x1x2", "2x2x4"))
    for result in (_dev(data_dir, TJOBS_STORAGE__TOPOLOGY="2x2x4"), _serve(config)):
        assert result.returncode == 2, result.stderr
        assert "refusing to start: " in result.stderr and "'1x1x2'" in result.stderr, result.stderr
        assert "Traceback" not in result.stderr and "╭" not in result.stderr, result.stderr


def test_a_refused_configuration_is_refused_before_the_api_and_the_node_are_loaded(tmp_path: Path) -> None:
    """The refusal reads only the settings: loading the API, the console and the node first (about
    2 s of CPU) made every refused start as slow as a real one."""
    config = tmp_path / "tjobs.toml"
    config.write_text("[api]\nport = 'eighty'\n")
    for command in (["serve", "--config", str(config)], ["dev", "--port", "0", "--data-dir", str(tmp_path / "dev")]):
        env = {"TJOBS_STORAGE__TOPOLOGY": "3x3"} if command[0] == "dev" else {}
        result = subprocess.run(
            [sys.executable, "-X", "importtime", "-m", "tjobs.cli.main", *command],
            capture_output=True,
            text=True,
            timeout=60,
            env={**os.environ, **env},
        )
        assert result.returncode == 2, result.stderr[-2000:]
        loaded = {
            line.rsplit("|", 1)[-1].strip() for line in result.stderr.splitlines() if line.startswith("import time:")
        }
        assert not {"tjobs.api.app", "tjobs.console", "tjobs.node"} & loaded, (command[0], sorted(loaded)[:20])
