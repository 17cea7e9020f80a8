"""``tjobs serve`` refuses to start with a weak admin key or metrics scrape token, saying which setting and how to
make a good one."""

from __future__ import annotations

from collections.abc import Coroutine
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

import tjobs.api.server
import tjobs.cli.main
from tjobs.cli.main import app as cli
from tjobs.settings import load_settings, weak_admin_key_reason, weak_scrape_token_reason

STRONG = "tja_Qm7xV2pL9sK4wE8rT1yU6iO3"


@pytest.fixture(autouse=True)
def _logging_left_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    """``serve`` configures logging first: in-process, the root logger's handler became CliRunner's stream,
    closed after the call, and every later log line of this worker failed (a traceback in the next CLI
    test's output: tests/api/test_app_admin.py's, run after this module on one worker)."""
    monkeypatch.setattr(tjobs.cli.main, "configure_logging", lambda **_: None)


@pytest.mark.parametrize(
    "key",
    [
        "change-me",
        "CHANGE_ME",
        "admin",
        "password",
        "short-key-123",
        "a" * 40,
        "abababababababababab",
        "REPLACE-with-32-random-characters",
        "please-change-me-now-0123",
    ],
)
def test_weak_admin_keys_are_named(key: str) -> None:
    reason = weak_admin_key_reason(load_settings(None, api={"admin_key": key}))
    assert reason is not None and "api.admin_key" in reason


@pytest.mark.parametrize("key", [None, STRONG, "tja_test_admin_key"])
def test_strong_or_unset_admin_keys_pass(key: str | None) -> None:
    assert weak_admin_key_reason(load_settings(None, api={"admin_key": key})) is None


def test_serve_refuses_to_start_with_the_example_placeholder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    started: list[object] = []

    def run(main: Coroutine[Any, Any, None]) -> None:
        started.append(main)
        main.close()

    monkeypatch.setattr(tjobs.api.server, "run", run)
    config = tmp_path / "tjobs.toml"
    config.write_text('[api]\nadmin_key = "change-me"\n[metrics]\nscrape_token = "' + STRONG + '"\n')
    result = CliRunner().invoke(cli, ["serve", "--config", str(config)])
    assert result.exit_code == 2 and not started, result.output
    assert "api.admin_key is too weak" in result.output


def test_the_example_configuration_does_not_start_as_is() -> None:
    example = Path(__file__).resolve().parents[2] / "tjobs.example.toml"
    assert weak_admin_key_reason(load_settings(example)) is not None


@pytest.mark.parametrize(
    "token",
    ["tjm_compose_scrape_change_me", "change-me-to-a-long-random-token", "t" * 32, "abababababababababab"],
)
def test_weak_scrape_tokens_are_named(token: str) -> None:
    """The scrape token reads every app's series and the cluster view: the admin key's rules hold for it."""
    reason = weak_scrape_token_reason(load_settings(None, metrics={"scrape_token": token}))
    assert reason is not None and "metrics.scrape_token" in reason


@pytest.mark.parametrize("token", [None, STRONG, "tjm_ops_access_scrape_token"])
def test_strong_or_unset_scrape_tokens_pass(token: str | None) -> None:
    assert weak_scrape_token_reason(load_settings(None, metrics={"scrape_token": token})) is None


def test_serve_refuses_to_start_with_a_placeholder_scrape_token(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    started: list[object] = []

    def run(main: Coroutine[Any, Any, None]) -> None:
        started.append(main)
        main.close()

    monkeypatch.setattr(tjobs.api.server, "run", run)
    config = tmp_path / "tjobs.toml"
    config.write_text(f'[api]\nadmin_key = "{STRONG}"\n[metrics]\nscrape_token = "replace-with-a-random-token"\n')
    result = CliRunner().invoke(cli, ["serve", "--config", str(config)])
    assert result.exit_code == 2 and not started, result.output
    assert "metrics.scrape_token is too weak" in result.output
