"""What can be checked of deploy/ without a Docker engine or a Kubernetes cluster."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml  # type: ignore[import-untyped]

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"


def compose() -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load((DEPLOY / "docker-compose.yml").read_text())
    return loaded


def test_compose_runs_the_whole_cluster() -> None:
    services = compose()["services"]
    assert {
        "mysql-1",
        "mysql-2",
        "etcd-1",
        "etcd-2",
        "etcd-3",
        "redis",
        "tjobs-1",
        "tjobs-2",
        "tjobs-3",
        "prometheus",
        "grafana",
        "receiver",
        "migrate",
    } <= set(services)
    for name in ("tjobs-1", "tjobs-2", "tjobs-3"):
        assert services[name]["environment"]["TJOBS_NODE_ID"] == name
        assert services[name]["depends_on"]["migrate"]["condition"] == "service_completed_successfully"


def test_compose_mounts_and_builds_only_files_that_exist() -> None:
    for name, service in compose()["services"].items():
        for volume in service.get("volumes", []):
            source = volume.split(":")[0]
            assert (DEPLOY / source).exists(), f"{name}: {source}"
        build = service.get("build")
        if build:
            context = DEPLOY / build["context"]
            assert (context / build["dockerfile"]).is_file(), name


def test_dockerfile_copies_only_sources_that_exist() -> None:
    text = (DEPLOY / "Dockerfile").read_text()
    copies = [line.split()[1:-1] for line in text.splitlines() if line.startswith("COPY ") and "--from" not in line]
    assert copies
    for sources in copies:
        for source in sources:
            assert (ROOT / source).exists(), source


def test_prometheus_scrapes_every_compose_node() -> None:
    config = yaml.safe_load((DEPLOY / "prometheus" / "prometheus.yml").read_text())
    targets = config["scrape_configs"][0]["static_configs"][0]["targets"]
    nodes = {name for name in compose()["services"] if re.fullmatch(r"tjobs-\d", name)}
    assert {t.split(":")[0] for t in targets} == nodes


def test_kubernetes_manifests_have_the_required_fields() -> None:
    documents = [
        d for path in sorted((DEPLOY / "k8s").glob("*.yaml")) for d in yaml.safe_load_all(path.read_text()) if d
    ]
    kinds = {d["kind"] for d in documents}
    assert {"ConfigMap", "Job", "StatefulSet", "Service"} <= kinds
    for document in documents:
        assert document["apiVersion"] and document["metadata"]["name"], document
        if document["kind"] in ("StatefulSet", "Deployment"):
            spec = document["spec"]
            assert spec["selector"]["matchLabels"].items() <= spec["template"]["metadata"]["labels"].items()
            for container in spec["template"]["spec"]["containers"]:
                assert container["image"] and container["readinessProbe"] and container["livenessProbe"]
        if document["kind"] == "ConfigMap" and "tjobs.toml" in document["data"]:
            import tomllib

            from tjobs.settings import Settings

            Settings.model_validate(tomllib.loads(document["data"]["tjobs.toml"]))


def test_baked_in_settings_file_is_valid() -> None:
    import tomllib

    from tjobs.settings import Settings

    Settings.model_validate(tomllib.loads((DEPLOY / "tjobs.toml").read_text()))
