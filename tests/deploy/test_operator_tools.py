"""Operator tools outside the Python package: ``scripts/screenshots`` works whichever Python
starts it, and the Prometheus alert rules and Grafana dashboards in ``deploy/`` are valid and
name only metrics Kalena exports."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.web.live_cluster import live  # noqa: F401 - the homelab live cluster fixture

ROOT = Path(__file__).resolve().parents[2]


def test_screenshots_runs_with_a_python_without_playwright() -> None:
    system = next((p for p in ("/usr/bin/python3", shutil.which("python3") or "")
                   if p and subprocess.run([p, "-c", "import playwright"], capture_output=True).returncode != 0), None)
    if system is None:
        pytest.skip("every python3 here has Playwright: nothing to fall back from")
    done = subprocess.run([system, str(ROOT / "scripts" / "screenshots"), "--help"], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    assert "--password" in done.stdout and "ModuleNotFoundError" not in done.stderr


PROMTOOL = ROOT / "var" / "tools" / "prometheus" / "usr" / "bin" / "promtool"
RULES = ROOT / "deploy" / "prometheus" / "kalena-alerts.yaml"
DASHBOARDS = sorted((ROOT / "deploy" / "grafana").glob("*.json"))
METRIC = re.compile(r"\bkalena_[a-z0-9_]+")


def _promtool() -> str:
    if not PROMTOOL.exists():
        pytest.fail(f"{PROMTOOL} is missing: run `scripts/services promtool` (./scripts/test does)")
    return str(PROMTOOL)


def test_alert_rules_pass_promtool_check_and_their_unit_tests() -> None:
    checked = subprocess.run([_promtool(), "check", "rules", str(RULES)], capture_output=True, text=True, timeout=60)
    assert checked.returncode == 0 and "SUCCESS: 13 rules found" in checked.stdout, checked.stdout + checked.stderr
    tested = subprocess.run([_promtool(), "test", "rules", "kalena-alerts.test.yaml"], cwd=RULES.parent,
                            capture_output=True, text=True, timeout=60)
    assert tested.returncode == 0 and "SUCCESS" in tested.stdout, tested.stdout + tested.stderr


def _exported(text: str) -> set[str]:
    """Sample names a Prometheus exposition carries: each ``# TYPE`` family, and for histograms
    its ``_bucket``, ``_sum`` and ``_count`` series."""
    names: set[str] = set()
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split()
            names.add(name)
            if kind == "histogram":
                names.update(f"{name}{s}" for s in ("_bucket", "_sum", "_count"))
    return names


@pytest.fixture
def exported(db, live, client, django_user_model) -> set[str]:  # noqa: F811 - live: the homelab cluster
    """Every metric name Kalena serves: the console's /metrics/cluster and /metrics, and an agent's."""
    from prometheus_client import generate_latest

    from agents.health import AgentMetrics
    from kalena_web.replan.tasks import drift

    drift(now_s=1000.0)  # a drift pass has run: its series exist
    names = _exported(client.get("/metrics/cluster").content.decode())
    names |= _exported(client.get("/metrics").content.decode())
    names |= _exported(generate_latest(AgentMetrics().registry).decode())
    assert {"kalena_node_slack_cores", "kalena_evictions_total", "kalena_drift_coverage_ratio",
            "kalena_agent_actions_total"} <= names
    return names


def _queries(value) -> list[str]:  # every "expr" (targets) and templating "query"/"definition" in a dashboard
    if isinstance(value, dict):
        found = [v for k, v in value.items() if k in ("expr", "definition") and isinstance(v, str)]
        return found + [q for v in value.values() for q in _queries(v)]
    if isinstance(value, list):
        return [q for v in value for q in _queries(v)]
    return []


@pytest.mark.django_db
def test_every_query_names_a_metric_kalena_exports(exported) -> None:
    import json

    import yaml

    assert len(DASHBOARDS) == 4
    for path in DASHBOARDS:
        dashboard = json.loads(path.read_text())
        assert dashboard["uid"] and dashboard["title"] and dashboard["panels"], path.name
        queries = _queries(dashboard)
        assert len(queries) >= 5, path.name
        for query in queries:
            unknown = set(METRIC.findall(query)) - exported
            assert not unknown, f"{path.name}: {query!r} names {sorted(unknown)}, which Kalena does not export"
    for group in yaml.safe_load(RULES.read_text())["groups"]:
        for rule in group["rules"]:
            unknown = set(METRIC.findall(rule["expr"])) - exported
            assert not unknown, f"{rule['alert']}: names {sorted(unknown)}, which Kalena does not export"


KUBECTL = ROOT / "var" / "tools" / "kubernetes-client" / "usr" / "bin" / "kubectl"


def test_the_kustomization_builds_with_kubectl_1_20_and_validates() -> None:
    """``kubectl apply -k deploy/kubernetes`` works with the kustomize inside Debian's kubectl 1.20
    (v2.0.3), and what it builds is the control plane and webhook, valid for Kubernetes 1.33."""
    import kubernetes_validate
    import yaml

    if not KUBECTL.exists():
        pytest.fail(f"{KUBECTL} is missing: run `scripts/services kubectl` (./scripts/test does)")
    built = subprocess.run([str(KUBECTL), "kustomize", str(ROOT / "deploy" / "kubernetes")], capture_output=True,
                           text=True, timeout=120)
    assert built.returncode == 0, built.stderr
    objects = [d for d in yaml.safe_load_all(built.stdout) if d]
    kinds = {(d["kind"], d["metadata"]["name"]) for d in objects}
    assert {("Namespace", "kalena"), ("Deployment", "kalena-console"), ("Job", "kalena-migrate"),
            ("MutatingWebhookConfiguration", "kalena")} <= kinds, sorted(kinds)
    for doc in objects:
        if doc["apiVersion"].startswith("cert-manager.io/"):
            continue  # not a core kind: no schema
        kubernetes_validate.validate(doc, "1.33.0", strict=True)
    images = {c["image"] for d in objects if d["kind"] in ("Deployment", "Job")
              for c in d["spec"]["template"]["spec"]["containers"]}
    assert images == {"kalena/control-plane:0.1.0"}


def _services_compose(tmp_path: Path, *, have: tuple[str, ...]) -> tuple[subprocess.CompletedProcess, str]:
    """`scripts/services compose` on a PATH holding only ``have`` (stubs) and a recording apt-get
    that "installs" docker-compose; returns the run and what apt-get was asked."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "dirname").symlink_to(shutil.which("dirname"))
    asked = tmp_path / "apt-get.args"
    stubs = {"apt-get": f'#!/bin/sh\necho "$@" >> {asked}\nprintf "#!/bin/sh\\nexit 0\\n" > {bin_dir}/docker-compose\n'
                        f"{shutil.which('chmod')} +x {bin_dir}/docker-compose\n",
             "docker": '#!/bin/sh\n[ "$1 $2" = "compose version" ] && [ -n "$PLUGIN" ]\n',
             "docker-compose": "#!/bin/sh\nexit 0\n"}
    for name in ("apt-get", *have):
        (bin_dir / name).write_text(stubs[name])
        (bin_dir / name).chmod(0o755)
    result = subprocess.run(["/bin/bash", str(ROOT / "scripts" / "services"), "compose"], capture_output=True,
                            text=True, env={"PATH": str(bin_dir), "PLUGIN": "1" if "plugin" in tmp_path.name else ""})
    return result, asked.read_text() if asked.exists() else ""


def test_services_installs_debian_s_docker_compose_when_no_compose_answers(tmp_path: Path) -> None:
    result, asked = _services_compose(tmp_path, have=("docker",))     # docker.io: no Compose plugin
    assert result.returncode == 0, result.stderr
    assert "install -y -q docker-compose" in asked and "installing docker-compose with apt" in result.stdout


@pytest.mark.parametrize("have", [("docker-compose",), ("docker",)], ids=["v1", "plugin"])
def test_services_leaves_an_answering_compose_alone(tmp_path: Path, have: tuple[str, ...]) -> None:
    plugin = tmp_path / "plugin" if have == ("docker",) else tmp_path / "v1"
    plugin.mkdir()
    result, asked = _services_compose(plugin, have=have)
    assert result.returncode == 0, result.stderr
    assert asked == ""
