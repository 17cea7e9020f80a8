"""Alert rules pass ``promtool check rules`` and their ``promtool test rules`` unit tests.

promtool comes with the Debian ``prometheus`` package (``scripts/services.sh up`` installs it). Under
CI (``CI`` set) a missing promtool is a failure; elsewhere the test skips.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

RULES_DIR = Path(__file__).resolve().parents[2] / "deploy" / "prometheus"


def promtool() -> str:
    path = shutil.which("promtool")
    if path is None:
        if os.environ.get("CI"):
            pytest.fail("promtool is missing: run scripts/services.sh up (Debian package prometheus)")
        pytest.skip("promtool not installed (scripts/services.sh up installs it)")
    return path


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([promtool(), *args], cwd=RULES_DIR, capture_output=True, text=True, timeout=60)


def test_alert_rules_are_valid() -> None:
    result = run("check", "rules", "alerts.yml")
    assert result.returncode == 0, result.stdout + result.stderr


def test_alert_rules_unit_tests_pass() -> None:
    result = run("test", "rules", "alerts_test.yml")
    assert result.returncode == 0, result.stdout + result.stderr


def test_prometheus_config_is_valid() -> None:
    result = run("check", "config", "--syntax-only", "prometheus.yml")
    assert result.returncode == 0, result.stdout + result.stderr


def test_every_alert_has_a_runbook_section_in_the_operations_guide() -> None:
    import yaml  # type: ignore[import-untyped]

    guide = (RULES_DIR.parents[1] / "docs" / "operations.md").read_text().lower()
    rules = yaml.safe_load((RULES_DIR / "alerts.yml").read_text())
    alerts = [r["alert"] for g in rules["groups"] for r in g["rules"] if "alert" in r]
    assert len(alerts) == 9
    for alert in alerts:
        assert f"### {alert.lower()}" in guide, alert
