"""What an operator's tooling expects of the deploy files: they validate against the Compose
specification and the Kubernetes schemas (offline), ship no default secret, mount docker.sock
only where the orchestrator is driven, migrate once before anything else starts, and give every
long-running process a probe."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
COMPOSE_FILES = ["compose/docker-compose.yml", "swarm/stack.yml", "agent/docker-compose.agent.yml"]
KUBERNETES_FILES = sorted(str(p.relative_to(DEPLOY)) for p in DEPLOY.rglob("*.yaml")
                          if any(isinstance(d, dict) and "apiVersion" in d and "kind" in d
                                 for d in yaml.safe_load_all(p.read_text())))
KNOWN_WEAK = ("change-me", "changeme", "kalena:kalena@", "POSTGRES_PASSWORD: kalena")


def _tool(name: str) -> str:
    path = shutil.which(name) or str(Path(sys.executable).parent / name)
    assert Path(path).exists(), f"{name} is not installed (it is in the dev extra)"
    return path


@pytest.mark.parametrize("name", COMPOSE_FILES)
def test_compose_files_follow_the_compose_spec(name: str) -> None:
    result = subprocess.run([_tool("check-jsonschema"), "--builtin-schema", "vendor.compose-spec", str(DEPLOY / name)],
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize("name", KUBERNETES_FILES)
def test_kubernetes_manifests_follow_the_api_schemas(name: str) -> None:
    result = subprocess.run([_tool("kubernetes-validate"), "--strict", "--quiet", str(DEPLOY / name)],
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize("name", COMPOSE_FILES + KUBERNETES_FILES)
def test_no_default_secret_ships(name: str) -> None:
    text = (DEPLOY / name).read_text()
    for weak in KNOWN_WEAK:
        assert weak not in text, f"{name} ships {weak!r}"
    for doc in yaml.safe_load_all(text):
        for svc in ((doc or {}).get("services") or {}).values():
            env = svc.get("environment") or {}
            for key in ("KALENA_SECRET_KEY", "POSTGRES_PASSWORD"):
                value = str(env.get(key, "${X:?}"))
                assert value.startswith("${") and ":?" in value, f"{name}: {key} has a default ({value})"


@pytest.mark.parametrize("name", ["compose/docker-compose.yml", "swarm/stack.yml"])
def test_docker_socket_never_in_the_web_process_and_migrations_come_first(name: str) -> None:
    services = yaml.safe_load((DEPLOY / name).read_text())["services"]
    assert not any("docker.sock" in str(v) for v in services["console"].get("volumes", []))
    assert any("docker.sock" in str(v) for v in services["worker"].get("volumes", []))  # binds batch
    # the engines' events are followed by a watch service holding the socket; the console's thread is off
    assert any("docker.sock" in str(v) for v in services["watch"].get("volumes", []))
    watch = " ".join(services["watch"].get("entrypoint") or []) + " " + " ".join(services["watch"].get("command") or [])
    assert "watch --cluster" in watch and "--create" in watch
    console = " ".join(services["console"].get("entrypoint") or []) + " " + " ".join(services["console"].get("command") or [])
    assert "serve" in console and "--no-watch" in console
    # one agent per node, each joining with the stack's join secret for its own node token
    agent = services["agent"]
    assert "--join-secret-file=/run/secrets/kalena_agent_join_secret" in agent["command"]
    assert "--node-name-from-engine" in agent["command"] and "kalena_agent_join_secret" in agent["secrets"]
    assert "kalena_agent_join_secret" in services["console"]["secrets"]
    assert not any("link_token" in str(v) for v in agent.values())
    for svc in ("console", "worker", "beat"):
        spec = services[svc]
        assert "healthcheck" in spec, f"{name}: {svc} has no health check"
        if name.startswith("compose"):
            assert spec["depends_on"]["migrate"] == {"condition": "service_completed_successfully"}
        else:  # Swarm ignores depends_on: the entrypoint waits for the migrate job
            assert "kalena probe migrations --wait" in " ".join(spec["entrypoint"])
            assert spec["deploy"]["restart_policy"]["condition"] == "any"
    if name.startswith("swarm"):
        assert services["migrate"]["deploy"]["mode"] == "replicated-job"
        assert services["agent"]["deploy"]["mode"] == "global"


def test_every_long_running_kubernetes_container_has_a_liveness_probe() -> None:
    for name in KUBERNETES_FILES:
        for doc in yaml.safe_load_all((DEPLOY / name).read_text()):
            if not isinstance(doc, dict) or doc.get("kind") not in ("Deployment", "DaemonSet", "StatefulSet"):
                continue
            for c in doc["spec"]["template"]["spec"]["containers"]:
                assert "livenessProbe" in c, f"{name}: {doc['metadata']['name']}/{c['name']} has no livenessProbe"


@pytest.mark.parametrize("name", ["Dockerfile", "agent/Dockerfile"])
def test_dockerfiles_are_multi_stage_unprivileged_and_checked(name: str) -> None:
    """What scripts/build-images verifies on the built images (it needs debootstrap and several
    minutes, so it runs on demand); here the Dockerfiles' shape."""
    text = (DEPLOY / name).read_text()
    froms = [line for line in text.splitlines() if line.startswith("FROM ")]
    assert froms[0] == "FROM ${BASE} AS build" and froms[-1] == "FROM ${BASE}", froms   # base as a build arg
    final = text[text.rindex("FROM ${BASE}\n"):]
    assert "COPY --from=build /opt/kalena /opt/kalena" in final
    assert "pip install" not in final and "apt-get" not in final                       # nothing built there
    (user,) = [line.split()[1] for line in final.splitlines() if line.startswith("USER ")]
    assert user.split(":")[0].isdigit() and int(user.split(":")[0]) > 0
    assert "\nHEALTHCHECK " in final
    assert "-e ." not in text and "--editable" not in text                              # the wheel, installed
    ignored = (DEPLOY.parent / ".dockerignore").read_text().split()
    assert {".venv", ".git", "var"} <= set(ignored)


#: the health check each long-running Kalena process answers (a probe the process itself keeps true)
PROBE_OF = {"console": ["kalena", "probe", "url"], "worker": ["kalena", "probe", "worker"],
            "beat": ["kalena", "probe", "beat"], "watch": ["kalena", "probe", "watch"],
            "agent": ["kalena-agent", "probe"]}


def kalena_process(spec: dict) -> str | None:
    """Which Kalena process a stack service (or a Kubernetes container) runs — console, worker,
    beat, watch or agent — from its image, entrypoint and command; None: a one-shot or none."""
    image = str(spec.get("image", ""))
    argv = [str(a) for key in ("entrypoint", "command", "args") for a in (spec.get(key) or [])]
    if image.startswith("kalena/agent"):
        return "agent"
    if not image.startswith("kalena/control-plane"):
        return None
    words = " ".join(argv).replace("exec ", "").split()
    if "celery" in words:
        return "worker" if "worker" in words else "beat" if "beat" in words else None
    kalena = [w for w in words if w not in ("sh", "-c")]
    # the image's entrypoint is `kalena`: a command alone starts with the subcommand
    sub = [w for i, w in enumerate(kalena) if i == 0 or kalena[i - 1] in ("kalena", "&&")]
    if "serve" in sub:
        return "console"
    if "watch" in sub:
        return "watch"
    return None


@pytest.mark.parametrize("name", ["compose/docker-compose.yml", "swarm/stack.yml"])
def test_every_long_running_kalena_service_has_its_own_fitting_health_check(name: str) -> None:
    """The image's HEALTHCHECK is the console's (/livez): a service that inherits it is unhealthy
    (Compose) or killed every minute (Swarm) unless it is the console."""
    services = yaml.safe_load((DEPLOY / name).read_text())["services"]
    seen = {}
    for svc, spec in services.items():
        process = kalena_process(spec)
        if process is None:
            continue
        seen[svc] = process
        check = (spec.get("healthcheck") or {}).get("test")
        assert check, f"{name}: {svc} runs the {process} and has no health check of its own"
        assert check[0] == "CMD" and check[1:1 + len(PROBE_OF[process])] == PROBE_OF[process], \
            f"{name}: {svc} runs the {process} but its health check is {check[1:]} (expected {PROBE_OF[process]})"
    # the migrate job is one-shot (no probe); every other Kalena service was classified
    assert seen == {"console": "console", "worker": "worker", "beat": "beat", "watch": "watch", "agent": "agent"}


def test_kubernetes_containers_running_the_watch_are_probed_by_its_heartbeat() -> None:
    for name in KUBERNETES_FILES:
        for doc in yaml.safe_load_all((DEPLOY / name).read_text()):
            if not isinstance(doc, dict) or doc.get("kind") not in ("Deployment", "DaemonSet", "StatefulSet"):
                continue
            for c in doc["spec"]["template"]["spec"]["containers"]:
                process = kalena_process(c)
                if process in ("watch", "worker", "beat"):
                    probe = (c.get("livenessProbe") or {}).get("exec", {}).get("command")
                    assert probe == PROBE_OF[process], f"{name}: {c['name']} runs the {process}; liveness {probe}"


def test_the_process_classification_reads_both_stack_forms() -> None:
    assert kalena_process({"image": "kalena/control-plane:0.1.0",
                           "command": ["watch", "--cluster", "docker", "--create"]}) == "watch"
    assert kalena_process({"image": "kalena/control-plane:0.1.0", "entrypoint": [
        "sh", "-c", "kalena probe migrations --wait 600 && exec kalena watch --cluster swarm --create"]}) == "watch"
    assert kalena_process({"image": "kalena/control-plane:0.1.0",
                           "entrypoint": ["celery", "-A", "kalena_web", "beat"]}) == "beat"
    assert kalena_process({"image": "kalena/control-plane:0.1.0", "entrypoint": ["kalena", "migrate"]}) is None
    assert kalena_process({"image": "postgres:16"}) is None


def _secrets_steps(text: str, *, comment: str = "") -> str:
    """The secrets steps of a walkthrough: from `d=/etc/kalena/secrets` to `export KALENA_SECRETS_DIR`."""
    lines = [line.removeprefix(comment).strip() for line in text.splitlines()]
    start = next(i for i, line in enumerate(lines) if line.startswith("d=/etc/kalena/secrets"))
    end = next(i for i, line in enumerate(lines) if i > start and line.startswith("export KALENA_SECRETS_DIR"))
    return "\n".join(lines[start:end + 1])


@pytest.mark.parametrize("where", ["docs/deploy-docker.md", "deploy/compose/docker-compose.yml"])
def test_the_secrets_steps_run_as_written_and_the_compose_command_after_them_finds_its_file(
        where: str, tmp_path: Path) -> None:
    """Followed literally from the checkout: the secrets land in the directory, and the next
    step's relative `-f deploy/compose/docker-compose.yml` still names the stack file."""
    text = (DEPLOY.parent / where).read_text()
    steps = _secrets_steps(text, comment="#" if where.endswith(".yml") else "")
    secrets_dir = tmp_path / "secrets"
    script = steps.replace("/etc/kalena/secrets", str(secrets_dir))
    script += '\ntest -f deploy/compose/docker-compose.yml || { echo "not found from $PWD" >&2; exit 3; }'
    script += '\nprintf %s "$KALENA_SECRETS_DIR"'
    result = subprocess.run(["bash", "-euo", "pipefail", "-c", script], cwd=DEPLOY.parent, capture_output=True,
                            text=True)
    assert result.returncode == 0, result.stderr
    assert result.stdout == str(secrets_dir)
    files = {p.name: p.read_text().strip() for p in secrets_dir.iterdir()}
    assert set(files) == {"secret_key", "db_password", "database_url", "metrics_token", "agent_join_secret"}
    assert files["database_url"] == f"postgres://kalena:{files['db_password']}@postgres:5432/kalena"
