"""The Kubernetes-mode lab starts its processes from the objects ``deploy/kubernetes`` and
``deploy/agent`` create on an API server (applied with Debian's kubectl): every container arg and
environment variable reaches its process — as written, or through a substitution the lab
records — and a value changed in a copy of the files changes the process started from it."""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

import pytest

from agents.lab import kubernetes as kube
from agents.lab.budget import lab_plan
from agents.lab.manifests import IMAGES
from agents.orchestrators.kubernetes.testserver import TestAPIServer

ROOT = Path(__file__).resolve().parents[3]
SUBNET = os.environ.get("KALENA_TEST_LAB_SUBNET", "127.0.0")


def _derive(tmp_path: Path, files, agent_flags: tuple[str, ...] = ()) -> tuple[list, list, dict]:
    """Apply ``files`` to a fresh test API server with kubectl, play cert-manager and the
    operator as the lab does, and derive the control plane's and the agents' processes."""
    if not os.access(kube.KUBECTL, os.X_OK):
        pytest.fail(f"Debian's kubectl is not at {kube.KUBECTL}: run scripts/services kubectl (scripts/test does)")
    plan = lab_plan(name="mtest", nodes=2, cpu_mcpu=250, memory_bytes=256 * 2**20, host_cores=2,
                    host_memory_bytes=8 * 2**30, subnet=SUBNET)
    with TestAPIServer(controllers=False) as api:
        kdir = tmp_path / "k"
        kdir.mkdir()
        (kdir / "kubeconfig").write_text(kube.kubeconfig_text(api.url))
        state = {"directory": str(kdir), "kubeconfig": str(kdir / "kubeconfig"), "kubectl": str(kube.KUBECTL)}
        kube.kubectl(state, "apply", *(a for f in files for a in ("-f", str(f))))
        workloads = kube._addresses(api.url, plan.subnet)
        services = kube._service_map(api.url, workloads)
        kube.issue_certificates(api.url, "kalena", services["dns_ip"], kdir / "certificates")
        kube._api(f"{api.url}/api/v1/namespaces/kalena/secrets", "POST", {
            "apiVersion": "v1", "kind": "Secret", "metadata": {"name": "kalena-secrets", "namespace": "kalena"},
            "stringData": {"DATABASE_URL": "sqlite:///x", "REDIS_URL": "redis://r/0", "KALENA_SECRET_KEY": "k",
                           "KALENA_METRICS_TOKEN": "m"}})
        tokens = kube._tokens(api.url, plan, kdir)
        cluster = kube._cluster(api.url, workloads, tokens, agent_flags)
        control = kube.control_plane_processes(api.url, cluster, kdir)
        nodes = [kube._node_record(n, tmp_path) for n in plan.nodes]
        agents = kube.agent_processes(api.url, cluster, nodes)
        objects = {"deployments": api.objects("deployments"), "jobs": api.objects("jobs"),
                   "daemonsets": api.objects("daemonsets"), "configmaps": api.objects("configmaps"),
                   "services": services}
    return control, agents, objects


def _originals(p) -> set[str]:
    """What each recorded substitution replaced: the word before its arrow (a flag, a path, a
    Service DNS name, an address)."""
    return {line.split(" → ", 1)[0].split()[-1] for line in p.substitutions if " → " in line} - {""}


def _containers(objects: dict):
    for kind in ("deployments", "jobs", "daemonsets"):
        for obj in objects[kind]:
            for c in obj["spec"]["template"]["spec"]["containers"]:
                yield obj, c


def test_every_container_arg_and_env_of_the_deploy_files_reaches_its_process_or_is_a_recorded_substitution(
        tmp_path) -> None:
    control, agents, objects = _derive(tmp_path, kube.DEPLOY_FILES)
    by_workload = {p.workload.split()[-1]: p for p in control + agents}
    assert set(by_workload) == {"kalena/kalena-migrate", "kalena/kalena-console", "kalena/kalena-scheduler",
                                "kalena/kalena-worker", "kalena/kalena-beat", "kalena-system/kalena-agent"}
    assert len(agents) == 2 and {p.node for p in agents} == {"mtest-1", "mtest-2"}
    config = next(c for c in objects["configmaps"] if c["metadata"]["name"] == "kalena-config")["data"]
    unexplained = []
    for obj, container in _containers(objects):
        key = f"{obj['metadata']['namespace']}/{obj['metadata']['name']}"
        for p in [p for p in control + agents if p.workload.endswith(" " + key)]:
            for word in [*(container.get("command") or [])[1:], *(container.get("args") or [])]:
                word = re.sub(r"\$\((\w+)\)", lambda m, env=p.env: env.get(m[1], m[0]), word)  # as the kubelet
                flag, _, value = word.partition("=")
                if word in p.argv:
                    continue
                # substituted: a recorded substitution names the flag or what it replaced in the word
                if flag in _originals(p) or any(o in word for o in _originals(p)):
                    continue
                unexplained.append(f"{key}: arg {word!r}")
            names = [e["name"] for e in container.get("env") or []]
            if any("configMapRef" in s for s in container.get("envFrom") or []):
                names += list(config)
            for name in names:
                if name not in p.env:
                    unexplained.append(f"{key}: env {name} missing")
                    continue
                written = next((str(e["value"]) for e in container.get("env") or [] if e["name"] == name and
                                "value" in e), config.get(name))
                if written is not None and p.env[name] != written and not any(o in written for o in _originals(p)):
                    unexplained.append(f"{key}: env {name}={p.env[name]!r} (written {written!r})")
            for which in ("startup", "readiness", "liveness"):
                if container.get(f"{which}Probe"):
                    assert which in p.probes, f"{key}: {which}Probe dropped"
                    assert p.probes[which].period_s == container[f"{which}Probe"].get("periodSeconds", 10)
    assert unexplained == [], "\n".join(unexplained)
    agent = agents[0]
    assert "--discovery=kubelet" in agent.argv and "--kube-cgroup-driver=cgroupfs" in agent.argv
    assert "--node-cgroup=kalena-mtest/mtest-1/kubepods" in agent.argv  # the kubelet double's pods' parent
    assert "--kube-cgroup-root=kalena-mtest/mtest-1/kubepods" in agent.argv
    assert f"--kubelet-url=http://{SUBNET}.2:10250" in agent.argv          # HOST_IP → the node's address
    assert f"--link-url=ws://{SUBNET}.101:8000/agent/v1/ws" in agent.argv  # Service kalena → the console's process
    assert f"--health-address={SUBNET}.2:9640" in agent.argv
    assert "--reserved=cpu=0m,memory=0" in agent.argv   # the Node's capacity − allocatable: the double keeps nothing
    scheduler = by_workload["kalena/kalena-scheduler"]
    assert scheduler.argv[3:] == ["serve", "--host", f"{SUBNET}.102", "--port", "8000", "--tls-host", f"{SUBNET}.102",
                                  "--tls-port", "8443", "--tls-cert", f"{scheduler.directory}/mounts/etc/kalena/tls/tls.crt",
                                  "--tls-key", f"{scheduler.directory}/mounts/etc/kalena/tls/tls.key",
                                  "--tls-client-ca", f"{scheduler.directory}/mounts/etc/kalena/hooks-client-ca/ca.crt"]
    assert set(scheduler.files) == {f"{scheduler.directory}/mounts/etc/kalena/tls/{f}" for f in
                                    ("tls.crt", "tls.key", "ca.crt")} | {
        f"{scheduler.directory}/mounts/etc/kalena/hooks-client-ca/ca.crt"} | {
        f"{scheduler.directory}/mounts/var/run/secrets/kubernetes.io/serviceaccount/{f}" for f in ("token", "namespace")}
    console = by_workload["kalena/kalena-console"]
    assert console.env["KALENA_ALLOWED_HOSTS"] == f"{SUBNET}.101,{SUBNET}.102,kalena.example.com"
    assert console.env["KALENA_METRICS_TOKEN"] == "m" and console.env["KALENA_ORCHESTRATOR_THROUGH_WORKERS"] == "1"
    assert console.probes["readiness"].url == f"http://{SUBNET}.101:8000/readyz"
    assert any("replicas 2 → 1" in i for i in console.ignored)


def test_beats_schedule_file_under_the_images_tmp_is_the_processs_own(tmp_path) -> None:
    # the files' `--schedule=/tmp/celerybeat-schedule` is the container's own /tmp: as written on
    # the host, every lab on the machine (and anything else) would share one schedule file
    control, _, _ = _derive(tmp_path, kube.DEPLOY_FILES)
    beat = next(p for p in control if p.workload.endswith(" kalena/kalena-beat"))
    assert f"--schedule={beat.directory}/fs/tmp/celerybeat-schedule" in beat.argv
    assert any("/tmp/celerybeat-schedule →" in s for s in beat.substitutions)


def test_a_value_changed_in_a_copy_of_the_files_changes_the_process_started_from_it(tmp_path) -> None:
    copies = []
    for f in kube.DEPLOY_FILES:
        text = f.read_text()
        text = text.replace('"--concurrency=2"', '"--concurrency=3"').replace(
            'KALENA_DRIFT_THRESHOLD: "0.25"', 'KALENA_DRIFT_THRESHOLD: "0.4"').replace(
            "--telemetry=cgroup", "--telemetry=kubelet").replace(
            "periodSeconds: 20\n            timeoutSeconds: 10", "periodSeconds: 7\n            timeoutSeconds: 10")
        out = tmp_path / f.name
        out.write_text(text)
        copies.append(out)
    assert copies[0].read_text() != kube.DEPLOY_FILES[0].read_text()
    control, agents, _ = _derive(tmp_path / "changed", copies) if (tmp_path / "changed").mkdir() is None else None
    by = {p.name: p for p in control}
    assert by["kalena-worker"].argv[-1] == "--concurrency=3"
    assert all(p.env["KALENA_DRIFT_THRESHOLD"] == "0.4" for p in control)
    assert "--telemetry=kubelet" in agents[0].argv and "--telemetry=cgroup" not in agents[0].argv
    assert by["kalena-scheduler"].probes["liveness"].period_s == 7


def test_the_agents_health_port_changed_in_a_copy_of_the_files_is_where_the_lab_asks_for_healthz(tmp_path) -> None:
    # `kalena lab status` read the agent's /healthz on 9640 whatever the files said: with the
    # DaemonSet's --health-address and containerPort moved to 9645 it showed a healthy agent as `None`
    daemonset = next(f for f in kube.DEPLOY_FILES if f.name == "daemonset.yaml")
    text = daemonset.read_text()
    assert "--health-address=0.0.0.0:9640" in text and "containerPort: 9640}" in text
    copy = tmp_path / daemonset.name
    copy.write_text(text.replace("--health-address=0.0.0.0:9640", "--health-address=0.0.0.0:9645").replace(
        "containerPort: 9640}", "containerPort: 9645}"))
    files = [copy if f == daemonset else f for f in kube.DEPLOY_FILES]
    (tmp_path / "changed").mkdir()
    _, agents, _ = _derive(tmp_path / "changed", files)
    plan = lab_plan(name="mtest", nodes=2, cpu_mcpu=250, memory_bytes=256 * 2**20, host_cores=2,
                    host_memory_bytes=8 * 2**30, subnet=SUBNET)
    for agent, node in zip(agents, plan.nodes, strict=True):
        assert f"--health-address={node.address}:9645" in agent.argv
        assert kube.agent_health_url(agent, kube._node_record(node, tmp_path)) == f"http://{node.address}:9645/healthz"


def test_up_with_a_missing_manifest_file_is_refused_naming_it_before_anything_starts(tmp_path) -> None:
    # kubectl refused it only after the nodes, the API server and the lab's database had started
    # (a minute of starting and stopping for a typo); the Redis here does not answer either, so
    # the refusal that names the file is the one made first
    from agents.lab.errors import LabError

    plan = lab_plan(name="mmissing", nodes=1, cpu_mcpu=250, memory_bytes=512 * 2**20, host_cores=2,
                    host_memory_bytes=8 * 2**30, subnet=SUBNET)
    missing = tmp_path / "producton.yaml"
    with pytest.raises(LabError) as refused:
        kube.lab_up_kubernetes(plan, state_dir=tmp_path / "lab", database_url="", redis_url="redis://127.0.0.1:1/0",
                               operator=lambda env, cluster: None, manifests=[missing])
    assert str(missing) in str(refused.value) and "--manifests" in str(refused.value)
    assert not (tmp_path / "lab").exists()


def test_the_image_table_is_the_dockerfiles_entrypoints_and_environment() -> None:
    for image, dockerfile in (("kalena/control-plane", ROOT / "deploy" / "Dockerfile"),
                              ("kalena/agent", ROOT / "deploy" / "agent" / "Dockerfile")):
        text = dockerfile.read_text()
        entry = re.findall(r"^ENTRYPOINT (\[.*\])", text, re.M)[-1]
        assert entry == "[" + ", ".join(f'"{w}"' for w in IMAGES[image]["entrypoint"]) + "]"
        final = text.rsplit("FROM ", 1)[1]
        for name, value in IMAGES[image]["env"].items():
            assert re.search(rf"\b{name}={re.escape(value)}\b", final), f"{image}: ENV {name}={value} not in {dockerfile}"


def teardown_module() -> None:
    shutil.rmtree(ROOT / "var" / "lab-manifests-test", ignore_errors=True)


def test_kalenas_own_images_run_as_placeholders_on_the_kubelet_double_since_the_lab_runs_them_as_processes() -> None:
    from agents.lab.kubelet.spec import container_command

    agent = {"name": "agent", "image": "kalena/agent:0.1.0", "args": ["run", "--node-name=$(NODE_NAME)"]}
    assert container_command({"metadata": {}}, agent) == ("kalena/busybox:test", ["sleep", "2147483647"])
    other = {"name": "web", "image": "nginx:1", "command": ["sh", "-c", "sleep 5"]}
    assert container_command({"metadata": {}}, other) == ("kalena/busybox:test", ["sh", "-c", "sleep 5"])


def test_kubernetes_mode_without_redis_or_kubectl_is_refused_before_anything_starts(tmp_path) -> None:
    from agents.lab.errors import LabError

    plan = lab_plan(name="mrefuse", nodes=1, cpu_mcpu=100, memory_bytes=64 * 2**20, host_cores=2,
                    host_memory_bytes=8 * 2**30, subnet=SUBNET)
    with pytest.raises(LabError, match="no Redis URL") as refused:
        kube.lab_up_kubernetes(plan, state_dir=tmp_path / "s", database_url="", redis_url="",
                               operator=lambda env, name: None)
    assert refused.value.field == "--redis-url"
    with pytest.raises(LabError, match="Debian's kubectl is not at"):
        kube.lab_up_kubernetes(plan, state_dir=tmp_path / "s", database_url="", redis_url=os.environ.get("KALENA_TEST_REDIS_URL", "redis://127.0.0.1:6379/13"),
                               operator=lambda env, name: None, kubectl_path=tmp_path / "no-kubectl")
    assert not (tmp_path / "s" / "lab.json").exists()
    assert not (Path("/sys/fs/cgroup/cpu") / plan.root).exists()


def test_a_compressed_day_runs_every_agent_on_its_compressed_clocks_and_records_the_substitution(tmp_path) -> None:
    from kalena_engine.labslice.compression import compress
    from kalena_engine.policy import Policy

    flags = compress(Policy(), 20).agent_flags()
    control, agents, _ = _derive(tmp_path, kube.DEPLOY_FILES, flags)
    assert agents
    for agent in agents:
        assert set(flags) <= set(agent.argv), agent.argv
        assert any("time compression" in line for line in agent.substitutions)
        flags_of = dict(w.split("=", 1) for w in agent.argv if w.startswith("--") and "=" in w)   # the last one wins
        settings = {k: float(flags_of[k]) for k in ("--sampling-interval-s", "--mitigation-interval-s",
                                                     "--psi-window-s")}
        assert settings == {"--sampling-interval-s": 1.0, "--mitigation-interval-s": 1.0, "--psi-window-s": 2.0}
    assert not any(f in p.argv for p in control for f in flags)     # the control plane's processes are not agents
