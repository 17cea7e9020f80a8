"""``tjobs serve --workers N`` from the settings alone: what is refused (one line naming the setting) and what
makes each worker its own cluster member (:mod:`tjobs.cli.workers`)."""

from __future__ import annotations

from typing import Any

import pytest

from tjobs.cli.workers import worker_settings, workers_problem
from tjobs.settings import Settings, load_settings

CLUSTER: dict[str, Any] = {
    "storage": {"urls": ["mysql+asyncmy://root@db:3306"]},
    "cluster": {"etcd_endpoints": ["http://etcd:2379"]},
    "metrics": {"listen": "0.0.0.0:9100"},
}


def _settings(**changes: Any) -> Settings:
    merged = {section: {**values, **changes.pop(section, {})} for section, values in CLUSTER.items()}
    return load_settings(None, **merged, **changes)


def test_a_cluster_on_database_servers_with_a_metrics_listener_may_run_workers() -> None:
    assert workers_problem(_settings(), 16) is None


@pytest.mark.parametrize("workers", [0, -3])
def test_fewer_than_one_worker_is_refused_naming_the_option(workers: int) -> None:
    assert workers_problem(_settings(), workers) == f"--workers must be at least 1, got {workers}"


def test_one_worker_needs_neither_etcd_nor_a_database_server() -> None:
    # Given the embedded defaults (SQLite, in-process coordination, metrics on the API's port)
    # When one supervised worker is asked for, then nothing is refused: it is one node, restarted when it dies
    assert workers_problem(load_settings(None), 1) is None


def test_workers_without_etcd_are_refused_naming_the_setting() -> None:
    problem = workers_problem(_settings(cluster={"etcd_endpoints": []}), 2)
    assert problem is not None and problem.startswith("--workers 2 needs cluster.etcd_endpoints:"), problem
    assert "one process" in problem


@pytest.mark.parametrize("url", ["sqlite+aiosqlite:///data", "memory://"])
def test_workers_on_a_store_of_one_process_are_refused_naming_it(url: str) -> None:
    problem = workers_problem(_settings(storage={"urls": ["mysql+asyncmy://root@db:3306", url]}), 2)
    assert problem is not None and problem.startswith(
        f"--workers 2 needs database servers in storage.urls, not {url!r}"
    )


def test_workers_with_metrics_on_the_api_port_are_refused_naming_metrics_listen() -> None:
    settings = _settings(metrics={"listen": None, "scrape_token": "a-scrape-token-0123456789"})
    problem = workers_problem(settings, 2)
    assert problem is not None and problem.startswith("--workers 2 needs metrics.listen"), problem
    assert workers_problem(_settings(metrics={"listen": None, "enabled": False}), 2) is None


def test_workers_whose_metrics_ports_would_take_the_api_port_are_refused() -> None:
    settings = _settings(metrics={"listen": "127.0.0.1:8078"}, api={"host": "127.0.0.1", "port": 8080})
    assert workers_problem(settings, 2) is None  # 8078, 8079
    problem = workers_problem(settings, 3)  # 8078..8080
    assert problem is not None and problem.startswith("metrics.listen (127.0.0.1:8078):"), problem


def test_workers_whose_metrics_ports_pass_65535_are_refused() -> None:
    problem = workers_problem(_settings(metrics={"listen": "127.0.0.1:65534"}), 3)
    assert problem == "metrics.listen (127.0.0.1:65534): 3 workers need ports 65534..65536, past 65535"


def test_each_worker_is_its_own_member_with_its_own_metrics_port() -> None:
    settings = _settings(node_id="box7", metrics={"listen": "[::1]:9100"})
    workers = [worker_settings(settings, index) for index in range(3)]
    assert [each.node_id for each in workers] == ["box7-w0", "box7-w1", "box7-w2"]
    assert [each.metrics.listen for each in workers] == ["[::1]:9100", "[::1]:9101", "[::1]:9102"]
    assert {each.api.port for each in workers} == {settings.api.port}  # the one shared address


def test_without_a_node_id_the_workers_are_named_after_the_host_and_port() -> None:
    settings = _settings(api={"port": 8081})
    assert worker_settings(settings, 1).node_id == f"{settings.node_identity()}-w1"
    assert settings.node_identity().endswith("-8081")


def test_a_metrics_port_of_zero_stays_zero_for_every_worker() -> None:
    settings = _settings(metrics={"listen": "127.0.0.1:0"})
    assert worker_settings(settings, 2).metrics.listen == "127.0.0.1:0"
