"""What can be checked of deploy/ without a Docker engine or a Kubernetes cluster."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path
from typing import Any

import pytest
import yaml  # type: ignore[import-untyped]

from tjobs.settings import Settings, metrics_exposure_problem, weak_admin_key_reason, weak_scrape_token_reason

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


class MissingVariable(Exception):
    pass


def interpolate(value: str, environment: dict[str, str]) -> str:
    """``value`` as compose interpolates it: ``${NAME}``, ``${NAME:-default}``, ``${NAME:?error}`` (an
    unset or empty NAME stops ``docker compose up`` with the error), ``$$`` is a literal ``$``."""

    def one(match: re.Match[str]) -> str:
        name, operator, argument = match.group(1), match.group(2), match.group(3)
        given = environment.get(name, "")
        if operator == ":?" and not given:
            raise MissingVariable(f"{name}: {argument}")
        if operator == ":-" and not given:
            return argument or ""
        return given

    return re.sub(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?:(:\?|:-)([^}]*))?\}", one, value.replace("$$", "\0")).replace(
        "\0", "$"
    )


def node_settings(name: str, environment: dict[str, str]) -> Settings:
    """The settings a compose node starts with: the baked-in file, then its TJOBS_* variables."""
    settings: dict[str, Any] = tomllib.loads((DEPLOY / "tjobs.toml").read_text())
    for variable, value in compose()["services"][name]["environment"].items():
        if not variable.startswith("TJOBS_") or "__" not in variable:
            continue
        section, _, field = variable.removeprefix("TJOBS_").lower().partition("__")
        settings.setdefault(section, {})[field] = interpolate(str(value), environment)
    return Settings.model_validate({**settings, "api": {**settings.get("api", {}), "host": "0.0.0.0", "port": 8000}})


STRONG_ENVIRONMENT = {
    "TJOBS_ADMIN_KEY": "tja_Qm7xV2pL9sK4wE8rT1yU6iO3",
    "TJOBS_METRICS_SCRAPE_TOKEN": "tjm_Zr5nB8cX2vM6kJ9hG3fD1sA4",
    "GRAFANA_ADMIN_PASSWORD": "Hq4wN7eR2tY9uI6oP1aS5dF8",
}


def test_compose_nodes_take_their_secrets_from_the_environment_and_start_with_them() -> None:
    """No secret has a default in the compose file (a default would be a placeholder, which
    ``tjobs serve`` refuses): ``docker compose up`` stops with an error naming the variable when it is
    unset, and nodes given strong values pass every check ``tjobs serve`` makes at start."""
    for name in ("tjobs-1", "tjobs-2", "tjobs-3"):
        for variable in ("TJOBS_ADMIN_KEY", "TJOBS_METRICS_SCRAPE_TOKEN"):
            without = {k: v for k, v in STRONG_ENVIRONMENT.items() if k != variable}
            with pytest.raises(MissingVariable, match=variable):
                node_settings(name, without)
        settings = node_settings(name, STRONG_ENVIRONMENT)
        assert settings.api.admin_key == STRONG_ENVIRONMENT["TJOBS_ADMIN_KEY"]
        assert settings.metrics.scrape_token == STRONG_ENVIRONMENT["TJOBS_METRICS_SCRAPE_TOKEN"]
        problem = weak_admin_key_reason(settings) or weak_scrape_token_reason(settings)
        assert (problem or metrics_exposure_problem(settings)) is None, (name, problem)
    prometheus = compose()["services"]["prometheus"]["environment"]["TJOBS_METRICS_SCRAPE_TOKEN"]
    with pytest.raises(MissingVariable, match="TJOBS_METRICS_SCRAPE_TOKEN"):
        interpolate(prometheus, {})


def test_compose_grafana_needs_a_login_and_monitoring_listens_on_localhost_only() -> None:
    """Grafana's dashboards show every app's series: no anonymous viewer, an admin password from the
    environment; Prometheus (no authentication of its own) and Grafana are published on 127.0.0.1 only."""
    services = compose()["services"]
    grafana = services["grafana"]["environment"]
    assert str(grafana.get("GF_AUTH_ANONYMOUS_ENABLED", "false")).lower() == "false"
    with pytest.raises(MissingVariable, match="GRAFANA_ADMIN_PASSWORD"):
        interpolate(grafana["GF_SECURITY_ADMIN_PASSWORD"], {})
    for name in ("prometheus", "grafana"):
        for port in services[name].get("ports", []):
            assert str(port).startswith("127.0.0.1:"), (name, port)


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
