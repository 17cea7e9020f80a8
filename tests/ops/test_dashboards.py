"""Every Grafana panel's PromQL returns data from a real Prometheus that scraped a real node under load.

A node (memory storage) serves on a loopback port; 200 interval tasks fire every second to a local
receiver; the Debian ``prometheus`` binary (own port, own temp data dir, 1 s scrape interval) scrapes
it with the node's ``metrics.scrape_token`` as its bearer credentials, as deploy/prometheus does; then
each panel's target, with ``$app`` substituted, is evaluated through ``/api/v1/query`` and
must return a non-empty result. Under CI (``CI`` set) a missing prometheus binary is a failure.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from testkit import run_node
from testkit.ports import free_port
from tests.receiver import Receiver
from tjobs.settings import load_settings

ROOT = Path(__file__).resolve().parents[2]
DASHBOARDS = sorted((ROOT / "grafana" / "dashboards").glob("*.json"))
ADMIN_KEY = "tja_ops_dashboard_admin"
SCRAPE_TOKEN = "tjm_ops_dashboard_scrape_token"
TASKS = 200


def panel_targets() -> Iterator[tuple[str, str, str]]:
    for path in DASHBOARDS:
        board = json.loads(path.read_text())
        for panel in board["panels"]:
            for target in panel["targets"]:
                yield path.stem, panel["title"], target["expr"]


def test_dashboards_are_generated_from_the_panel_tables() -> None:
    import importlib.util

    spec = importlib.util.spec_from_file_location("build_dashboards", ROOT / "grafana" / "build_dashboards.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert {p.stem for p in DASHBOARDS} == set(module.DASHBOARDS) == {"slo-overview", "per-app", "cluster", "storage"}
    for path in DASHBOARDS:
        title, panels = module.DASHBOARDS[path.stem]
        assert json.loads(path.read_text()) == module.dashboard(path.stem, title, panels), path.name


def test_every_panel_has_a_prometheus_target() -> None:
    for path in DASHBOARDS:
        board = json.loads(path.read_text())
        assert board["panels"], path.name
        for panel in board["panels"]:
            assert panel["datasource"]["uid"] == "prometheus"
            assert [t["expr"] for t in panel["targets"]], panel["title"]


def prometheus_binary() -> str:
    path = shutil.which("prometheus")
    if path is None:
        if os.environ.get("CI"):
            pytest.fail("prometheus is missing: run scripts/services.sh up (Debian package prometheus)")
        pytest.skip("prometheus not installed (scripts/services.sh up installs it)")
    return path


async def test_every_panel_returns_data_from_a_scraped_node(tmp_path: Path) -> None:
    binary = prometheus_binary()
    settings = load_settings(
        None,
        storage={"urls": ["memory://"], "topology": "2x2x4"},
        api={"admin_key": ADMIN_KEY},
        scheduler={"tick_ms": 10, "cycle_s": 10, "load_lead_s": 3},
        metrics={"scrape_token": SCRAPE_TOKEN},
        allow_loopback_callbacks=True,
    )
    async with Receiver() as receiver, run_node(settings) as node:
        async with httpx.AsyncClient(base_url=node.base_url) as anonymous:
            assert (await anonymous.get("/metrics")).status_code == 401  # the token is what lets Prometheus in
        api_key = await _create_app(node.base_url)
        async with httpx.AsyncClient(
            base_url=node.base_url, timeout=30, headers={"authorization": f"Bearer {api_key}"}
        ) as client:
            start_ms = (int(time.time()) + 2) * 1000
            start = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(start_ms / 1000))
            bodies = [
                {
                    "name": f"ops-{i}",
                    "schedule": {"kind": "interval", "every_ms": 1000, "start_at": start},
                    "callback": {"url": receiver.url("/hook")},
                }
                for i in range(TASKS)
            ]
            for chunk in range(0, TASKS, 50):
                responses = await asyncio.gather(
                    *(client.post("/v1/tasks", json=b) for b in bodies[chunk : chunk + 50])
                )
                assert all(r.status_code == 201 for r in responses), responses[0].text
            port = free_port()
            process = _start_prometheus(binary, tmp_path, port, node.base_url.split("//")[1])
            try:
                await _wait_ready(port, process)
                missing = await _panels_without_data(port, deadline_s=60)
            finally:
                process.terminate()
                try:
                    process.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.wait()
    assert missing == [], f"panels without data: {missing}"


async def _create_app(base_url: str) -> str:
    async with httpx.AsyncClient(base_url=base_url, headers={"authorization": f"Bearer {ADMIN_KEY}"}) as admin:
        response = await admin.post("/v1/apps", json={"name": "ops", "allowed_callback_hosts": ["127.0.0.1"]})
        assert response.status_code == 201, response.text
        key: str = response.json()["api_key"]
        return key


def _start_prometheus(binary: str, tmp_path: Path, port: int, target: str) -> subprocess.Popen[bytes]:
    config = tmp_path / "prometheus.yml"
    config.write_text(
        "global: {scrape_interval: 1s, evaluation_interval: 1s}\n"
        "scrape_configs:\n"
        f"  - job_name: tjobs\n    static_configs: [{{targets: ['{target}']}}]\n"
        f"    authorization: {{type: Bearer, credentials: '{SCRAPE_TOKEN}'}}\n"
    )
    with (tmp_path / "prometheus.log").open("wb") as log:
        return subprocess.Popen(
            [
                binary,
                f"--config.file={config}",
                f"--storage.tsdb.path={tmp_path / 'data'}",
                f"--web.listen-address=127.0.0.1:{port}",
                "--log.level=warn",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
        )


async def _wait_ready(port: int, process: subprocess.Popen[bytes]) -> None:
    async with httpx.AsyncClient() as client:
        for _ in range(300):
            assert process.poll() is None, "prometheus exited"
            try:
                if (await client.get(f"http://127.0.0.1:{port}/-/ready")).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            await asyncio.sleep(0.1)
    raise AssertionError("prometheus never became ready")


async def _panels_without_data(port: int, deadline_s: float) -> list[str]:
    """Poll until every target returns data or the deadline passes; the stragglers are returned."""
    deadline = time.monotonic() + deadline_s
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as client:
        apps: list[str] = []
        while not apps and time.monotonic() < deadline:  # $app as Grafana fills it: a value of the label
            apps = (await client.get("/api/v1/label/app/values")).json()["data"]
            await asyncio.sleep(0.5)
        assert apps, "no app label scraped"
        pending = {(board, title): expr.replace("$app", apps[0]) for board, title, expr in panel_targets()}
        while pending and time.monotonic() < deadline:
            for key, expr in list(pending.items()):
                response = await client.get("/api/v1/query", params={"query": expr})
                body: dict[str, Any] = response.json()
                assert body["status"] == "success", (key, expr, body)
                if any(_has_value(r) for r in body["data"]["result"]):
                    del pending[key]
            await asyncio.sleep(1)
    return [f"{board} / {title}: {pending[(board, title)]}" for board, title in pending]


def _has_value(result: dict[str, Any]) -> bool:
    value = result["value"][1]
    return value not in ("NaN",)
