"""``tjobs dlq list`` and ``tjobs dlq redrive --all-matching`` take the same filters, declared once: the
same flags reach the API as the same filters, whether listed, counted or redriven (against a stub API)."""

from __future__ import annotations

import inspect
import json
from typing import Any

import httpx
import pytest
from typer.testing import CliRunner

import tjobs.cli.api_commands
import tjobs.cli.dead_letter_commands
from tjobs.cli.main import app as cli
from tjobs.client import Client

FLAGS = ["--task-name", "ord", "--task", "42", "--target", "pay", "--last-answer", "5xx", "--window", "24h"]
FLAGS += ["--from", "2026-01-01T00:00:00Z", "--to", "1800000000000"]
FILTERS = {"task_name_prefix": "ord", "task_id": "42", "target": "pay", "last_answer": "5xx", "window": "24h"}
FILTERS |= {"from": "2026-01-01T00:00:00Z", "to": "1800000000000"}
JOB = {"id": "job_1", "kind": "redrive", "app_id": "a", "state": "done", "total": 1, "processed": 1, "failed": 0}
JOB |= {"cancel_requested": False, "params": {}, "created_by": "a", "created_at": "2026-01-01T00:00:00Z"}
JOB |= {"updated_at": "2026-01-01T00:00:00Z"}


def stub(request: httpx.Request, seen: list[tuple[str, dict[str, Any]]]) -> httpx.Response:
    path = request.url.path
    if request.method == "POST":
        seen.append((path, json.loads(request.content)["filters"]))
        return httpx.Response(201, json=JOB)
    seen.append((path, dict(request.url.params)))
    if path == "/v1/dead-letters:count":
        count = {"matched": 1, "more": False, "at_most": 100_000}
        return httpx.Response(200, json={**count, "dead_before": "2026-01-02T00:00:00Z", "dead_before_ms": 1})
    return httpx.Response(200, json={"items": [], "next_cursor": None})


def test_list_and_redrive_all_matching_send_the_same_filters(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[tuple[str, dict[str, Any]]] = []
    transport = httpx.MockTransport(lambda request: stub(request, seen))

    def client(url: str, authorization: str) -> Client:
        return Client(url, headers={"authorization": authorization}, transport=transport)

    monkeypatch.setattr(tjobs.cli.api_commands, "cli_client", client)
    env = {"TJOBS_URL": "http://stub", "TJOBS_API_KEY": "k"}
    for args in (["dlq", "list", *FLAGS, "--json"], ["dlq", "redrive", "--all-matching", *FLAGS, "--yes", "--json"]):
        result = CliRunner().invoke(cli, args, env=env)
        assert result.exit_code == 0, result.output

    listed, counted, started = seen
    assert listed == ("/v1/dead-letters", {**FILTERS, "limit": "50"})
    assert counted == ("/v1/dead-letters:count", FILTERS)
    assert started == ("/v1/dead-letters/redrive-jobs", FILTERS)


def test_the_filters_are_declared_once() -> None:
    source = inspect.getsource(tjobs.cli.dead_letter_commands)
    for flag in FLAGS[::2]:
        assert source.count(f'"{flag}"') == 1, flag
    assert source.count("task_name_prefix=") <= 1
