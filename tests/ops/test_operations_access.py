"""Who may read the operations endpoints: ``/v1/cluster`` takes the admin key or the metrics scrape
token; ``/metrics`` takes the scrape token when one is set, or moves to its own listener; and
``tjobs serve`` refuses to start with metrics open on the API's listener unless told to."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import tomllib
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, suppress
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml  # type: ignore[import-untyped]

from testkit import RunningNode, run_node
from testkit.ports import free_port
from tjobs.api.ratelimit import ApiRateLimits
from tjobs.api.routes_ops import create_metrics_api
from tjobs.settings import Settings, load_settings, metrics_exposure_problem

ROOT = Path(__file__).resolve().parents[2]
ADMIN_KEY = "tja_ops_access_admin_key"
SCRAPE_TOKEN = "tjm_ops_access_scrape_token"


@asynccontextmanager
async def node_with(**metrics: Any) -> AsyncIterator[RunningNode]:
    settings = load_settings(
        None, storage={"urls": ["memory://"], "topology": "1x1x4"}, api={"admin_key": ADMIN_KEY}, metrics=metrics
    )
    async with run_node(settings) as running:
        yield running


def bearer(key: str) -> dict[str, str]:
    return {"authorization": f"Bearer {key}"}


async def test_cluster_view_needs_the_admin_key_or_the_scrape_token() -> None:
    async with node_with(scrape_token=SCRAPE_TOKEN) as running:
        _, app_key = await running.create_app("tenant")
        async with httpx.AsyncClient(base_url=running.base_url) as client:
            anonymous = await client.get("/v1/cluster")
            as_app = await client.get("/v1/cluster", headers=bearer(app_key))
            as_admin = await client.get("/v1/cluster", headers=bearer(ADMIN_KEY))
            as_scraper = await client.get("/v1/cluster", headers=bearer(SCRAPE_TOKEN))
    assert anonymous.status_code == 401 and anonymous.json()["error"]["code"] == "unauthorized"
    assert as_app.status_code == 401  # an app's key reads its own tasks, not the cluster
    assert as_admin.status_code == 200 and as_admin.json()["node_id"]
    assert as_scraper.status_code == 200 and as_scraper.json()["jobs"] == [0, 1, 2, 3]


async def test_cluster_view_is_closed_even_without_a_scrape_token() -> None:
    async with node_with() as running, httpx.AsyncClient(base_url=running.base_url) as client:
        assert (await client.get("/v1/cluster")).status_code == 401
        assert (await client.get("/v1/cluster", headers=bearer(ADMIN_KEY))).status_code == 200


async def test_readiness_answers_ready_without_the_cluster_view() -> None:
    """``/readyz`` is open (probes carry no key): it says ready or not, never the members, addresses,
    plan or database servers that ``/v1/cluster`` keeps behind the operator's credential."""
    async with node_with(scrape_token=SCRAPE_TOKEN) as running, httpx.AsyncClient(base_url=running.base_url) as client:
        ready = await client.get("/readyz")
        servers = running.node.store.database_servers()
        assert ready.status_code == 200 and ready.json() == {"status": "ready"}
        assert running.node.node_id not in ready.text and not any(server in ready.text for server in servers)
        cluster = await client.get("/v1/cluster", headers=bearer(SCRAPE_TOKEN))
        assert cluster.status_code == 200 and cluster.json()["database_servers"]  # the view is still there


async def test_not_ready_names_no_database_server() -> None:
    async with node_with(scrape_token=SCRAPE_TOKEN) as running, httpx.AsyncClient(base_url=running.base_url) as client:
        unreachable = [{"server": "10.20.30.40:3306", "reachable": False, "last_error": "refused by 10.20.30.40"}]
        running.node.db_health.describe = lambda: unreachable  # type: ignore[method-assign]
        not_ready = await client.get("/readyz")
    assert not_ready.status_code == 503, not_ready.text
    error = not_ready.json()["error"]
    assert error["code"] == "not_ready" and error["message"] and "10.20.30.40" not in not_ready.text


async def test_metrics_with_a_scrape_token_answer_only_the_token_or_the_admin_key() -> None:
    async with node_with(scrape_token=SCRAPE_TOKEN) as running:
        _, app_key = await running.create_app("tenant")
        async with httpx.AsyncClient(base_url=running.base_url) as client:
            anonymous = await client.get("/metrics")
            wrong = await client.get("/metrics", headers=bearer(SCRAPE_TOKEN + "x"))
            as_app = await client.get("/metrics", headers=bearer(app_key))
            scraped = await client.get("/metrics", headers=bearer(SCRAPE_TOKEN))
            as_admin = await client.get("/metrics", headers=bearer(ADMIN_KEY))
    assert [r.status_code for r in (anonymous, wrong, as_app)] == [401, 401, 401]
    assert "tjobs_" not in anonymous.text and anonymous.json()["error"]["code"] == "unauthorized"
    assert scraped.status_code == 200 and "tjobs_wheel_tasks" in scraped.text
    assert as_admin.status_code == 200


async def test_a_separate_metrics_listener_takes_metrics_off_the_api_listener() -> None:
    async with node_with(listen="127.0.0.1:1", scrape_token=SCRAPE_TOKEN) as running:
        async with httpx.AsyncClient(base_url=running.base_url) as client:
            on_api = await client.get("/metrics", headers=bearer(SCRAPE_TOKEN))
        assert on_api.status_code == 404 and on_api.json()["error"]["code"] == "metrics_elsewhere"
        metrics_api = create_metrics_api(running.node, ApiRateLimits(running.node.settings.rate_limits))
        transport = httpx.ASGITransport(app=metrics_api)
        async with httpx.AsyncClient(transport=transport, base_url="http://metrics") as scraper:
            anonymous = await scraper.get("/metrics")
            scraped = await scraper.get("/metrics", headers=bearer(SCRAPE_TOKEN))
            other = await scraper.get("/v1/app", headers=bearer(SCRAPE_TOKEN))
    assert anonymous.status_code == 401
    assert scraped.status_code == 200 and "tjobs_wheel_tasks" in scraped.text
    assert other.status_code == 404  # the metrics listener serves nothing else


def _settings(**metrics: Any) -> Settings:
    return load_settings(None, api={"host": "0.0.0.0", "port": 8000}, metrics=metrics)


def test_serving_refuses_metrics_open_on_the_api_listener_unless_told_to() -> None:
    problem = metrics_exposure_problem(_settings())
    assert problem is not None and "metrics.scrape_token" in problem and "0.0.0.0:8000" in problem
    assert metrics_exposure_problem(_settings(scrape_token=SCRAPE_TOKEN)) is None
    assert metrics_exposure_problem(_settings(listen="10.0.0.5:9100")) is None
    assert metrics_exposure_problem(_settings(public=True)) is None
    assert metrics_exposure_problem(_settings(enabled=False)) is None
    clash = metrics_exposure_problem(_settings(listen="0.0.0.0:8000", scrape_token=SCRAPE_TOKEN))
    assert clash is not None and "metrics.listen" in clash


def test_a_short_scrape_token_is_refused() -> None:
    with pytest.raises(ValueError, match="scrape_token"):
        _settings(scrape_token="short")


def _serve(tmp_path: Path, env: dict[str, str], wait_s: float) -> tuple[subprocess.Popen[bytes], Path]:
    log = tmp_path / "serve.log"
    with log.open("wb") as handle:
        process = subprocess.Popen(
            [sys.executable, "-m", "tjobs.cli.main", "serve"],
            cwd=tmp_path,
            stdout=handle,
            stderr=subprocess.STDOUT,
            env={
                **os.environ,
                "TJOBS_STORAGE__URLS": '["memory://"]',
                "TJOBS_STORAGE__TOPOLOGY": "1x1x4",
                "TJOBS_API__ADMIN_KEY": ADMIN_KEY,
                **env,
            },
        )
    with suppress(subprocess.TimeoutExpired):
        process.wait(timeout=wait_s)
    return process, log


def test_tjobs_serve_refuses_to_start_with_open_metrics(tmp_path: Path) -> None:
    process, log = _serve(tmp_path, {"TJOBS_API__PORT": str(free_port())}, wait_s=60)
    assert process.returncode == 2, log.read_text()
    assert "refusing to start" in log.read_text() and "metrics.scrape_token" in log.read_text()


def test_tjobs_serve_runs_a_separate_metrics_listener(tmp_path: Path) -> None:
    api_port, metrics_port = free_port(), free_port()
    process, log = _serve(
        tmp_path,
        {
            "TJOBS_API__PORT": str(api_port),
            "TJOBS_METRICS__LISTEN": f"127.0.0.1:{metrics_port}",
            "TJOBS_METRICS__SCRAPE_TOKEN": SCRAPE_TOKEN,
        },
        wait_s=0,
    )
    try:
        deadline = time.monotonic() + 60
        while True:
            assert process.poll() is None, log.read_text()
            try:
                scraped = httpx.get(f"http://127.0.0.1:{metrics_port}/metrics", headers=bearer(SCRAPE_TOKEN))
                break
            except httpx.TransportError:
                assert time.monotonic() < deadline, log.read_text()
                time.sleep(0.1)
        anonymous = httpx.get(f"http://127.0.0.1:{metrics_port}/metrics")
        on_api = httpx.get(f"http://127.0.0.1:{api_port}/metrics", headers=bearer(SCRAPE_TOKEN))
    finally:
        process.terminate()
        process.wait(timeout=30)
    assert scraped.status_code == 200 and "tjobs_jobs_owned" in scraped.text
    assert anonymous.status_code == 401
    assert on_api.status_code == 404


def _compose() -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load((ROOT / "deploy" / "docker-compose.yml").read_text())
    return loaded


def _required_variable(value: str) -> str:
    """The NAME of ``${NAME:?error}``: compose stops unless NAME is set (no placeholder default)."""
    assert value.startswith("${") and ":?" in value and value.endswith("}"), value
    return value[2 : value.index(":?")]


def test_compose_nodes_and_prometheus_share_one_scrape_token_variable() -> None:
    services = _compose()["services"]
    variables = {
        _required_variable(services[name]["environment"]["TJOBS_METRICS__SCRAPE_TOKEN"])
        for name in ("tjobs-1", "tjobs-2", "tjobs-3")
    }
    prometheus = services["prometheus"]
    assert {_required_variable(prometheus["environment"]["TJOBS_METRICS_SCRAPE_TOKEN"])} == variables
    config = yaml.safe_load((ROOT / "deploy" / "prometheus" / "prometheus.yml").read_text())
    authorization = config["scrape_configs"][0]["authorization"]
    assert authorization["type"] == "Bearer"
    assert authorization["credentials_file"] in " ".join(prometheus["entrypoint"])


def test_kubernetes_nodes_take_their_scrape_token_from_the_secret() -> None:
    documents = list(yaml.safe_load_all((ROOT / "deploy" / "k8s" / "tjobs.yaml").read_text()))
    [stateful] = [d for d in documents if d and d["kind"] == "StatefulSet"]
    [config] = [d for d in documents if d and d["kind"] == "ConfigMap"]
    env = {e["name"]: e for e in stateful["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert env["TJOBS_METRICS__SCRAPE_TOKEN"]["valueFrom"]["secretKeyRef"]["key"] == "metrics-scrape-token"
    settings = Settings.model_validate(
        {**tomllib.loads(config["data"]["tjobs.toml"]), "metrics": {"scrape_token": "t" * 32}}
    )
    assert metrics_exposure_problem(settings) is None
