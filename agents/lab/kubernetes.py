"""``kalena lab up --orchestrator kubernetes``: the lab as a Kubernetes cluster — the lab's API
server (:mod:`agents.lab.apiserver`), ``deploy/kubernetes`` and ``deploy/agent`` applied to it
with Debian's kubectl as written, the control plane, webhook, extender and agents started as
local processes *from the applied objects* (:mod:`agents.lab.manifests`: only the recorded
substitutions), and per node a cgroup subtree, a private engine and a kubelet double
(``python -m agents.lab.kubelet``) that runs the pods bound to it.

Order (each piece recorded in ``lab.json`` before the next starts; any failure stops everything
started so far): nodes' cgroups and engines → API server → ``kubectl apply`` → certificates (the
lab plays cert-manager and its CA injector) and the operator's Secret ``kalena-secrets`` → extra
manifests (:func:`lab_up_kubernetes`'s ``manifests``) → the migration Job → the operator's live
cluster → console, scheduler (webhook and extender on its hooks port), workers, beat → per node
the kubelet double, then the agent (DaemonSet). The console side (Django) is not imported here:
the caller passes ``operator`` (creates the live cluster with the migrated database's env).
"""

from __future__ import annotations

import base64
import json
import os
import re
import secrets
import shutil
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import redis

from agents.lab import kubelets
from agents.lab import nodes as machinery
from agents.lab.budget import LabPlan
from agents.lab.errors import LabError
from agents.lab.lab import _node_record, lab_down, port_free, preflight, recorded
from agents.lab.manifests import Cluster, Placement, Probe, Process, derive, secret_data
from agents.lab.state import alive, process_ref, state_read, state_write, stop

ROOT = Path(__file__).resolve().parents[2]
KUBECTL = ROOT / "var" / "tools" / "kubernetes-client" / "usr" / "bin" / "kubectl"
#: what ``kubectl apply -f`` gets, in order: the API objects of the deploy files (the other two files
#: of deploy/kubernetes configure kube-apiserver and kube-scheduler and are read as such)
DEPLOY_FILES = (ROOT / "deploy" / "kubernetes" / "control-plane.yaml", ROOT / "deploy" / "kubernetes" / "webhook.yaml",
                ROOT / "deploy" / "agent" / "daemonset.yaml")
ADMISSION_FILE = ROOT / "deploy" / "kubernetes" / "apiserver-admission.yaml"
API_PORT = 6443
KUBELET_PORT = kubelets.KUBELET_PORT
#: the control plane's pods' addresses: <subnet>.(FIRST_POD_HOST + i)
FIRST_POD_HOST = 100
#: the order the control plane starts in (the migration Job first, as an operator waits for it)
CONTROL_PLANE = ("kalena-migrate", "kalena-console", "kalena-scheduler", "kalena-worker", "kalena-beat")
HEAVY_WAIT_S = 180.0


def _api(url: str, method: str = "GET", body: Any = None, *, content_type: str = "application/json") -> Any:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, method=method, headers={"Content-Type": content_type})
    with urllib.request.urlopen(request, timeout=10) as response:  # noqa: S310 - the lab's own loopback server
        return json.loads(response.read() or b"{}")


def _items(api: str, path: str) -> list[dict]:
    return _api(api + path).get("items") or []


def kubeconfig_text(server: str, token: str = "") -> str:
    user = f"{{token: '{token}'}}" if token else "{}"
    return ("apiVersion: v1\nkind: Config\n"
            f"clusters: [{{name: lab, cluster: {{server: '{server}'}}}}]\n"
            f"users: [{{name: lab, user: {user}}}]\n"
            "contexts: [{name: lab, context: {cluster: lab, user: lab}}]\ncurrent-context: lab\n")


def kubectl(state: dict[str, Any], *args: str, stdin: str | None = None, check: bool = True,
            timeout_s: float = 120.0) -> subprocess.CompletedProcess:
    """Debian's kubectl against the lab (its kubeconfig, a clean environment).

    A call that does not answer within ``timeout_s`` is killed and comes back with exit status
    124 and a stderr saying so (the object it was creating may or may not exist).

    Raises:
        LabError: kubectl failed or timed out and ``check`` (its stderr quoted).
    """
    env = {"PATH": "/usr/bin:/bin", "HOME": state["directory"], "KUBECONFIG": state["kubeconfig"]}
    try:
        done = subprocess.run([state["kubectl"], *args], env=env, capture_output=True, text=True, input=stdin,
                              timeout=timeout_s, check=False)
    except subprocess.TimeoutExpired:
        done = subprocess.CompletedProcess([state["kubectl"], *args], 124, "",
                                           f"kubectl {' '.join(args)} did not answer within {timeout_s:g} s "
                                           "(killed; what it asked for may or may not have been done)")
    if check and done.returncode != 0:
        raise LabError(f"kubectl {' '.join(args)} failed: {done.stderr.strip()[:600]}", source="kubectl",
                       field=args[0] if args else "")
    return done


# -- certificates: what cert-manager and its CA injector do for webhook.yaml ---------------------

def issue_certificates(api: str, namespace: str, extra_ip: dict[str, str], out: Path) -> list[str]:
    """Issue every cert-manager Certificate of ``namespace`` into its Secret (``tls.crt``,
    ``tls.key``, ``ca.crt``), then inject the CA named by ``cert-manager.io/inject-ca-from`` into
    the webhook configurations' ``caBundle``; returns the substitution lines.

    A selfSigned Issuer's certificates are signed by one lab CA (cert-manager would make each
    self-signed; the CA is then their ``ca.crt``); a CA Issuer's by the CA in its Secret. A
    certificate whose DNS name is a Service's also names that Service's lab address
    (``extra_ip``: DNS name → address), since callers reach it there.
    """
    import trustme

    issuers = {i["metadata"]["name"]: i for i in _items(api, f"/apis/cert-manager.io/v1/namespaces/{namespace}/issuers")}
    certs = _items(api, f"/apis/cert-manager.io/v1/namespaces/{namespace}/certificates")
    self_ca = trustme.CA(key_type=trustme.KeyType.ECDSA)
    cas: dict[str, Any] = {}
    issued: dict[str, dict[str, bytes]] = {}
    lines = [f"cert-manager → the lab issues the Certificates of namespace {namespace} (selfSigned Issuer: one lab "
             "CA; CA Issuer: the CA in its Secret) and injects the webhook CA"]
    pending = list(certs)
    for _ in range(len(certs) + 1):  # CA Issuers need their CA's Certificate first
        left = []
        for cert in pending:
            spec = cert["spec"]
            issuer = issuers.get(spec["issuerRef"]["name"], {}).get("spec") or {}
            if "ca" in issuer:
                signer = cas.get(issuer["ca"]["secretName"])
                if signer is None:
                    left.append(cert)
                    continue
            else:
                signer = self_ca
            if spec.get("isCA"):
                ca = signer.create_child_ca(key_type=trustme.KeyType.ECDSA) if signer is not self_ca else \
                    trustme.CA(key_type=trustme.KeyType.ECDSA)
                cas[spec["secretName"]] = ca
                issued[spec["secretName"]] = {"tls.crt": ca.cert_pem.bytes(), "tls.key": ca.private_key_pem.bytes(),
                                              "ca.crt": ca.cert_pem.bytes()}
                continue
            names = list(spec.get("dnsNames") or [])
            ips = sorted({extra_ip[n] for n in names if n in extra_ip})
            names += ips
            leaf = signer.issue_cert(*(names or [spec.get("commonName", "lab")]), common_name=spec.get("commonName"),
                                     key_type=trustme.KeyType.ECDSA)
            if ips:
                lines.append(f"Certificate {spec['secretName']}: also for {', '.join(ips)} (the Service's lab address)")
            issued[spec["secretName"]] = {"tls.crt": b"".join(b.bytes() for b in leaf.cert_chain_pems),
                                          "tls.key": leaf.private_key_pem.bytes(), "ca.crt": signer.cert_pem.bytes()}
        pending = left
    if pending:
        raise LabError(f"Certificate(s) {', '.join(c['metadata']['name'] for c in pending)} name an Issuer whose CA "
                       "is never issued", source=f"namespace {namespace}", field="spec.issuerRef")
    for name, data in issued.items():
        body = {"apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/tls",
                "metadata": {"name": name, "namespace": namespace},
                "data": {k: base64.b64encode(v).decode() for k, v in data.items()}}
        _api(f"{api}/api/v1/namespaces/{namespace}/secrets", "POST", body)
        (out / name).mkdir(parents=True, exist_ok=True)
        for k, v in data.items():
            (out / name / k).write_bytes(v)
    by_cert = {c["metadata"]["name"]: c["spec"]["secretName"] for c in certs}
    for config in _items(api, "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations"):
        source = ((config.get("metadata") or {}).get("annotations") or {}).get("cert-manager.io/inject-ca-from", "")
        ns, _, cert_name = source.partition("/")
        if ns != namespace or cert_name not in by_cert:
            continue
        bundle = base64.b64encode(issued[by_cert[cert_name]]["ca.crt"]).decode()
        hooks = [{**h, "clientConfig": {**h["clientConfig"], "caBundle": bundle}} for h in config.get("webhooks") or []]
        _api(f"{api}/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations/{config['metadata']['name']}",
             "PATCH", {"webhooks": hooks}, content_type="application/merge-patch+json")
    return lines


# -- the lab's Secret and database ---------------------------------------------------------------

def lab_database(database_url: str, lab: str, directory: Path) -> tuple[str, str]:
    """The control plane's database: on the PostgreSQL server of ``database_url`` a database of
    the lab's own (``kalena_labdb_<name>``, created fresh), else a SQLite file in ``directory``.
    Returns ``(DATABASE_URL, created database name or "")``."""
    if database_url.startswith(("postgres://", "postgresql://")):
        import psycopg

        name = "kalena_labdb_" + re.sub(r"[^a-z0-9_]", "_", lab)
        base = database_url.rsplit("/", 1)[0]
        with psycopg.connect(base + "/postgres", autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
            conn.execute(f'CREATE DATABASE "{name}"')
        return f"{base}/{name}", name
    directory.mkdir(parents=True, exist_ok=True)
    return f"sqlite:///{directory / 'kalena.sqlite3'}", ""


def drop_database(database_url: str, name: str) -> None:
    if not name:
        return
    import psycopg

    with psycopg.connect(database_url.rsplit("/", 1)[0] + "/postgres", autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


# -- probes ----------------------------------------------------------------------------------------

def probe_once(probe: Probe, env: dict[str, str]) -> tuple[bool, str]:
    """Run ``probe`` once as the kubelet would: HTTP 200–399, or exit status 0 within its timeout."""
    if probe.kind == "http":
        try:
            with urllib.request.urlopen(probe.url, timeout=probe.timeout_s) as response:  # noqa: S310 - loopback
                return 200 <= response.status < 400, f"HTTP {response.status}"
        except urllib.error.HTTPError as exc:
            return False, f"HTTP {exc.code}"
        except OSError as exc:
            return False, str(exc)[:120]
    try:
        done = subprocess.run(list(probe.argv), env=env, capture_output=True, text=True, timeout=probe.timeout_s,
                              cwd=ROOT, check=False)
    except subprocess.TimeoutExpired:
        return False, f"timed out after {probe.timeout_s:g} s"
    return done.returncode == 0, (done.stdout + done.stderr).strip()[:160] or f"exit {done.returncode}"


def _wait_probe(proc: subprocess.Popen, probe: Probe, env: dict[str, str], log: str, name: str) -> None:
    """The startup (or readiness) probe until it passes: ``initialDelaySeconds``, then every
    ``periodSeconds`` up to ``failureThreshold`` failures (at least :data:`HEAVY_WAIT_S`: the lab's
    machine is shared)."""
    time.sleep(min(probe.initial_delay_s, 5.0))
    end = time.monotonic() + max(probe.period_s * probe.failure_threshold, HEAVY_WAIT_S)
    last = ""
    while time.monotonic() < end:
        if proc.poll() is not None:
            raise LabError(f"exited with {proc.returncode} (see {log})", source=name, field="process")
        ok, last = probe_once(probe, env)
        if ok:
            return
        time.sleep(min(probe.period_s, 2.0))
    raise LabError(f"{probe.which} probe still failing ({last}; see {log})", source=name, field=f"{probe.which}Probe")


# -- up --------------------------------------------------------------------------------------------

def _start(argv: Sequence[str], env: dict[str, str], log: Path, cwd: Path = ROOT, *,
           cgroup: str = "") -> subprocess.Popen:
    """Start ``argv`` in its own session, its output appended to ``log``; with ``cgroup``, inside
    that group (:func:`agents.lab.nodes.cgroup_entry`)."""
    enter = machinery.cgroup_entry(cgroup) if cgroup else None
    with open(log, "ab") as out:
        return subprocess.Popen(list(argv), env=env, cwd=cwd, stdout=out, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True, preexec_fn=enter)


def agent_pod_group(api: str, record: dict[str, Any], timeout_s: float = 60.0) -> str:
    """The cgroup (relative to each hierarchy's root) of the agent DaemonSet's pod on the node of
    ``record``, once the node's kubelet double runs it: the agent process is started inside it,
    so its memory and cpu count on the node as the pod's would on a real one.

    Raises:
        LabError: no running pod of a DaemonSet in ``kalena-system`` on that node within ``timeout_s``.
    """
    from agents.lab.kubelet.spec import pod_cgroup, qos_class

    path = f"/api/v1/namespaces/kalena-system/pods?fieldSelector=spec.nodeName%3D{record['name']}"
    end = time.monotonic() + timeout_s
    while True:
        for pod in _items(api, path):
            owners = pod["metadata"].get("ownerReferences") or []
            if any(o.get("kind") == "DaemonSet" for o in owners) and (pod.get("status") or {}).get("phase") == "Running":
                rel = pod_cgroup(record["cgroup"], pod["metadata"]["uid"], qos_class(pod))
                if (machinery.CGROUP_ROOT / "memory" / rel).is_dir():
                    return rel
        if time.monotonic() > end:
            raise LabError(f"no running pod of the agent DaemonSet after {timeout_s:.0f} s",
                           source=f"node {record['name']}", field="kalena-system pods",
                           accepted="the kubelet double running the DaemonSet's pod")
        time.sleep(0.5)


def _wait_port(address: str, port: int, proc: subprocess.Popen, log: Path, what: str, timeout_s: float = 60.0) -> None:
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        if proc.poll() is not None:
            raise LabError(f"exited with {proc.returncode} before listening (see {log})", source=what, field="process")
        with socket.socket() as s:
            if s.connect_ex((address, port)) == 0:
                return
        time.sleep(0.2)
    raise LabError(f"not listening on {address}:{port} after {timeout_s:.0f} s (see {log})", source=what,
                   field="process")


def _token() -> str:
    return secrets.token_urlsafe(32)


def preflight_kubernetes(plan: LabPlan, *, state_dir: Path, kubectl_path: Path) -> None:
    """:func:`agents.lab.lab.preflight` plus what Kubernetes mode needs: Debian's kubectl, and the
    API server's, the control plane's and the kubelets' ports free.

    Raises:
        LabRunning, LabError.
    """
    if not os.access(kubectl_path, os.X_OK):
        raise LabError(f"Debian's kubectl is not at {kubectl_path}", source="kalena lab up", field="kubectl",
                       accepted="scripts/services kubectl (extracts the kubernetes-client package)")
    preflight(plan, state_dir=state_dir, console_port=None)   # the console runs in the control plane's pods
    busy = [f"{plan.subnet}.1:{API_PORT} (API server)"] if not port_free(f"{plan.subnet}.1", API_PORT) else []
    busy += [f"{n.address}:{KUBELET_PORT} (kubelet of {n.name})" for n in plan.nodes
             if not port_free(n.address, KUBELET_PORT)]
    for i, _ in enumerate(CONTROL_PLANE):
        address = f"{plan.subnet}.{FIRST_POD_HOST + i}"
        busy += [f"{address}:{p}" for p in (8000, 8443) if not port_free(address, p)]
    if busy:
        raise LabError(f"port(s) in use: {', '.join(busy)}", source="kalena lab up", field="--subnet",
                       accepted="free ports (another --subnet, or stop what listens there)")


def _redis_answers(redis_url: str) -> None:
    """Refuse, before anything starts, a Redis that does not answer PING (else the lab comes up
    with workers and beat retrying a broker that is not there). The message names the URL
    without its credentials."""
    try:
        redis.Redis.from_url(redis_url, socket_connect_timeout=3, socket_timeout=3).ping()
    except (redis.RedisError, ValueError, OSError) as exc:
        shown = re.sub(r"//[^/@]*@", "//", redis_url)
        raise LabError(f"Redis at {shown} does not answer ({exc})", source="kalena lab up --orchestrator kubernetes",
                       field="--redis-url", accepted="a reachable redis://HOST:PORT/DB") from None


def lab_up_kubernetes(plan: LabPlan, *, state_dir: Path, database_url: str, redis_url: str,
                      operator: Callable[[dict[str, str], str], None], manifests: Sequence[Path] = (),
                      deploy_files: Sequence[Path] = DEPLOY_FILES, admission_file: Path = ADMISSION_FILE,
                      kubectl_path: Path = KUBECTL, replicas_cap: int = 1, sampling_interval_s: float = 2.0,
                      agent_flags: Sequence[str] = (), say: Callable[[str], None] = print) -> dict[str, Any]:
    """Start the Kubernetes-mode lab (see module doc); returns the state record.

    ``operator(env, cluster)`` creates the live cluster ``cluster`` in the database ``env`` names
    (after the migration Job). ``agent_flags`` are appended to every agent's args (the day's
    time compression: its clocks ÷ the speed). ``manifests`` are applied after the deploy files (a slice's
    production, a test's Deployment and Job). ``redis_url`` is the Celery broker and channel
    layer of the control plane (required: workers and beat are separate processes).

    Raises:
        LabRunning, LabError: refused before anything started, or a piece failed — then
            everything started so far was stopped again.
    """
    unreadable = [str(m) for m in manifests if not os.access(m, os.R_OK) or not Path(m).is_file()]
    if unreadable:   # kubectl would say so only once the nodes and the control plane had started
        raise LabError(f"no such manifest file: {', '.join(unreadable)}", source="kalena lab up", field="--manifests",
                       accepted="existing, readable YAML files")
    if not redis_url:
        raise LabError("no Redis URL", source="kalena lab up --orchestrator kubernetes", field="--redis-url",
                       accepted="redis://HOST:PORT/DB (the control plane's workers and beat need a broker)")
    _redis_answers(redis_url)
    state_dir = Path(state_dir).resolve()
    preflight_kubernetes(plan, state_dir=state_dir, kubectl_path=kubectl_path)
    state_dir.mkdir(parents=True, exist_ok=True)   # only once nothing refuses: a refused up leaves nothing
    logs = state_dir / "logs"
    logs.mkdir(exist_ok=True)
    kdir = state_dir / "kubernetes"
    shutil.rmtree(kdir, ignore_errors=True)
    kdir.mkdir()
    api_address = f"{plan.subnet}.1"
    api_url = f"http://{api_address}:{API_PORT}"
    state: dict[str, Any] = {
        "name": plan.name, "orchestrator": "kubernetes", "cgroup_root": plan.root, "status": "starting",
        "started_s": time.time(), "directory": str(kdir), "kubectl": str(kubectl_path),
        "kubeconfig": str(kdir / "kubeconfig"), "logs": str(logs),
        "budget": {"cpu_mcpu": plan.cpu_budget_mcpu, "memory_bytes": plan.memory_budget_bytes,
                   "host_cores": plan.host_cores, "host_memory_bytes": plan.host_memory_bytes},
        "apiserver": {"url": api_url, "address": api_address, "port": API_PORT, "process": None,
                      "log": str(logs / "apiserver.log")},
        "console": {"url": "", "address": f"{plan.subnet}.{FIRST_POD_HOST + 1}", "port": 8000, "process": None,
                    "log": "", "env": {}},
        "database": {"url": "", "created": ""}, "processes": [], "substitutions": [],
        "nodes": [_node_record(n, state_dir) for n in plan.nodes]}
    state_write(state_dir, state)
    try:
        # -- the machines
        for node, record in zip(plan.nodes, state["nodes"], strict=True):
            machinery.cgroups_create(node, lab_root=plan.root)
            proc = machinery.engine_launch(node, Path(record["directory"]))
            record["engine"] = process_ref(proc.pid)
            state_write(state_dir, state)
            machinery.engine_ready(proc, node, Path(record["directory"]))
            say(f"kalena lab: node {node.name} up: {node.cpu_mcpu} m, {node.memory_bytes // 2**20} MiB, engine "
                f"{record['socket']}")
        # -- the API server, with kube-apiserver's admission configuration from the deploy files
        admission = _admission_config(admission_file, kdir)
        proc = _start([sys.executable, "-m", "agents.lab.apiserver", "--address", api_address, "--port", str(API_PORT),
                       "--state-dir", str(kdir), "--admission-config", str(admission)],
                      {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "PYTHONUNBUFFERED": "1"},
                      Path(state["apiserver"]["log"]))
        state["apiserver"]["process"] = process_ref(proc.pid)
        state_write(state_dir, state)
        _wait_port(api_address, API_PORT, proc, Path(state["apiserver"]["log"]), "API server")
        (kdir / "kubeconfig").write_text(kubeconfig_text(api_url))
        say(f"kalena lab: API server on {api_url} (kubeconfig {kdir / 'kubeconfig'})")
        # -- the deploy files as written
        applied = kubectl(state, "apply", *(a for f in deploy_files for a in ("-f", str(f))))
        say(f"kalena lab: kubectl apply: {len(applied.stdout.splitlines())} objects from "
            f"{', '.join(str(Path(f).relative_to(ROOT)) if Path(f).is_relative_to(ROOT) else str(f) for f in deploy_files)}")
        addresses = _addresses(api_url, plan.subnet)
        services = _service_map(api_url, addresses)
        (kdir / "services.json").write_text(json.dumps(services["map"], indent=1))
        state["substitutions"] += services["lines"]
        state["substitutions"] += issue_certificates(api_url, "kalena", services["dns_ip"], kdir / "certificates")
        state["substitutions"] += _admission_substitution(admission_file, admission)
        # -- the operator's Secret (named by the manifests, created by whoever installs Kalena)
        db_url, created = lab_database(database_url, plan.name, state_dir / "console")
        state["database"] = {"url": db_url, "created": created, "server": database_url}
        state_write(state_dir, state)
        secret = {"DATABASE_URL": db_url, "REDIS_URL": redis_url, "KALENA_SECRET_KEY": _token() + _token(),
                  "KALENA_METRICS_TOKEN": _token()}
        _api(f"{api_url}/api/v1/namespaces/kalena/secrets", "POST", {
            "apiVersion": "v1", "kind": "Secret", "metadata": {"name": "kalena-secrets", "namespace": "kalena"},
            "stringData": secret})
        state["substitutions"].append(f"Secret kalena-secrets (the operator's) → created by the lab: DATABASE_URL "
                                      f"{db_url.split('@')[-1]}, REDIS_URL {redis_url.split('@')[-1]}, a fresh "
                                      "KALENA_SECRET_KEY and KALENA_METRICS_TOKEN")
        # -- service-account tokens: every ServiceAccount's, the kubelets', the agents' projected ones
        tokens = _tokens(api_url, plan, kdir)
        apply_manifests(state, manifests)
        # -- the control plane, from the applied objects
        cluster = _cluster(api_url, addresses, tokens, agent_flags)
        procs = control_plane_processes(api_url, cluster, kdir, replicas_cap=replicas_cap)
        agents = agent_processes(api_url, cluster, state["nodes"])
        for p in procs:
            _materialise(p, api_url, tokens)
            log = logs / f"{p.name}.log"
            record = {"name": p.name, "workload": p.workload, "container": p.container, "argv": p.argv,
                      "address": p.address, "log": str(log), "process": None, "node": "",
                      "probes": {k: v.__dict__ for k, v in p.probes.items()}, "substitutions": p.substitutions,
                      "ignored": p.ignored, "env": p.env, "directory": p.directory}
            state["processes"].append(record)
            if p.run_to_completion:
                _run_job(p, log, say)
                operator(p.env, _tokenreview_cluster(cluster))
                state["cluster"] = _tokenreview_cluster(cluster)   # the live cluster `status` names
                say(f"kalena lab: live cluster {_tokenreview_cluster(cluster)!r} created (the operator's step)")
                continue
            proc = _start(p.argv, p.env, log)
            record["process"] = process_ref(proc.pid)
            state_write(state_dir, state)
            gate = p.probes.get("startup") or p.probes.get("readiness") or p.probes.get("liveness")
            if gate is not None:
                _wait_probe(proc, gate, p.env, str(log), p.workload)
            if p.workload.endswith("/kalena-console"):
                state["console"].update(url=f"http://{p.address}:8000/", address=p.address, port=8000,
                                        log=str(log), env={k: v for k, v in p.env.items()
                                                           if k in ("DATABASE_URL", "KALENA_ORCHESTRATOR", "KUBECONFIG")})
            say(f"kalena lab: {p.workload} ({p.container}) running as pid {proc.pid} on {p.address}")
            state_write(state_dir, state)
        # -- per node: the kubelet double, then the agent of the DaemonSet
        for node, record in zip(plan.nodes, state["nodes"], strict=True):
            token_file = Path(record["directory"]) / "kubelet.token"
            _write_private(token_file, tokens["kubelet:" + node.name])
            proc = kubelets.kubelet_launch(record, api_server=api_url, token_file=str(token_file), logs=logs,
                                           port=KUBELET_PORT)
            state_write(state_dir, state)
            kubelets.kubelet_ready(record)
            _wait_node(api_url, node.name, proc, Path(record["kubelet_log"]))
        for p in agents:
            _materialise(p, api_url, tokens)
            record = next(r for r in state["nodes"] if r["name"] == p.node)
            log = logs / f"agent-{p.node}.log"
            cgroup = agent_pod_group(api_url, record)
            record.update(agent_argv=p.argv, agent_env=p.env, agent_substitutions=p.substitutions, agent_ignored=p.ignored,
                          agent_probes={k: v.__dict__ for k, v in p.probes.items()}, agent_cgroup=cgroup,
                          health_url=agent_health_url(p, record))
            proc = _start(p.argv, p.env, log, cgroup=cgroup)
            record["agent"] = process_ref(proc.pid)
            state_write(state_dir, state)
        for p in agents:
            record = next(r for r in state["nodes"] if r["name"] == p.node)
            gate = p.probes.get("liveness")
            if gate is not None:
                _wait_probe(_Ref(record["agent"]), gate, p.env, str(logs / f"agent-{p.node}.log"), p.workload)
            say(f"kalena lab: node {p.node}: kubelet double and agent up")
        state["status"] = "up"
        state_write(state_dir, state)
    except BaseException:
        say("kalena lab: start failed; stopping what was started")
        lab_down_kubernetes(state_dir, say=say)
        raise
    return state


def agent_health_url(process: Process, record: dict[str, Any]) -> str:
    """Where ``status``, ``fault`` and ``up`` ask the node's agent for its ``/healthz``: the URL
    its DaemonSet's HTTP liveness probe names (the files' port, e.g. a ``--health-address`` and
    ``containerPort`` changed together), else the node record's default
    (``http://<node address>:9640/healthz``)."""
    probe = process.probes.get("liveness")
    if probe is not None and probe.kind == "http":
        return probe.url
    return record["health_url"]


def apply_manifests(state: dict[str, Any], manifests: Sequence[Path]) -> list[str]:
    """``kubectl apply -f`` each of ``manifests`` to the lab's API server (after the deploy files:
    a production slice, a test's Deployments and Jobs); returns kubectl's lines (``… created``).
    ``state`` is the lab's record (:func:`agents.lab.state.state_read`), so a running lab takes
    more manifests the same way.

    Raises:
        LabError: kubectl refused a file (its message quoted).
    """
    out: list[str] = []
    for path in manifests:
        out += kubectl(state, "apply", "-f", str(path)).stdout.splitlines()
    return out


class _Ref:
    """A recorded process as :func:`_wait_probe` watches it."""

    def __init__(self, ref: dict[str, int] | None) -> None:
        self.ref, self.returncode = ref, None

    def poll(self) -> int | None:
        return None if alive(self.ref) else -1


def _admission_config(source: Path, kdir: Path) -> Path:
    """kube-apiserver's admission files from ``apiserver-admission.yaml``: its two documents with
    ``/etc/kubernetes/kalena`` made the lab's directory, and the client certificate files it names
    linked to the Secret ``kalena-apiserver-client`` the lab issues."""
    import yaml

    docs = [d for d in yaml.safe_load_all(source.read_text()) if d]
    etc = kdir / "etc-kubernetes-kalena"
    etc.mkdir(exist_ok=True)
    text = json.dumps(docs).replace("/etc/kubernetes/kalena", str(etc))
    docs = json.loads(text)
    config = next(d for d in docs if d.get("kind") == "AdmissionConfiguration")
    kubeconfig = next(d for d in docs if d.get("kind") == "Config")
    path = Path(config["plugins"][0]["configuration"]["kubeConfigFile"])
    path.write_text(yaml.safe_dump(kubeconfig))
    out = etc / "admission.yaml"
    out.write_text(yaml.safe_dump(config))
    return out


def _admission_substitution(source: Path, written: Path) -> list[str]:
    etc = written.parent
    client = etc.parent / "certificates" / "kalena-apiserver-client"
    for name, key in (("apiserver-client.crt", "tls.crt"), ("apiserver-client.key", "tls.key")):
        target = etc / name
        if client.is_dir():
            shutil.copyfile(client / key, target)
    return [f"{source.relative_to(ROOT) if source.is_relative_to(ROOT) else source}: /etc/kubernetes/kalena → {etc} "
            "(the API server's --admission-config; the client certificate copied from Secret kalena-apiserver-client)"]


def _addresses(api: str, subnet: str) -> dict[str, dict[str, Any]]:
    """Each control-plane Deployment/Job of namespace kalena → its pod address, labels, named ports."""
    out: dict[str, dict[str, Any]] = {}
    objects = _items(api, "/apis/apps/v1/namespaces/kalena/deployments") + _items(api, "/apis/batch/v1/namespaces/kalena/jobs")
    for obj in objects:
        name = obj["metadata"]["name"]
        i = CONTROL_PLANE.index(name) if name in CONTROL_PLANE else len(CONTROL_PLANE) + len(out)
        template = (obj.get("spec") or {}).get("template") or {}
        ports = {p["name"]: p["containerPort"] for c in (template.get("spec") or {}).get("containers") or []
                 for p in c.get("ports") or [] if p.get("name")}
        out[f"kalena/{name}"] = {"address": f"{subnet}.{FIRST_POD_HOST + i}", "ports": ports,
                                 "labels": (template.get("metadata") or {}).get("labels") or {}}
    return out


def _service_map(api: str, workloads: dict[str, dict[str, Any]]) -> dict[str, Any]:
    mapping: dict[str, str] = {}
    dns_ip: dict[str, str] = {}
    lines = []
    for svc in _items(api, "/api/v1/namespaces/kalena/services"):
        name, ns = svc["metadata"]["name"], svc["metadata"]["namespace"]
        selector = (svc.get("spec") or {}).get("selector") or {}
        backing = [k for k, w in workloads.items() if selector and all(w["labels"].get(a) == b for a, b in selector.items())]
        if not backing:
            continue
        w = workloads[backing[0]]
        for p in (svc.get("spec") or {}).get("ports") or []:
            target = p.get("targetPort", p["port"])
            target = w["ports"].get(target, target)
            for dns in (f"{name}.{ns}.svc", f"{name}.{ns}.svc.cluster.local"):
                mapping[f"{dns}:{p['port']}"] = f"{w['address']}:{target}"
                dns_ip[dns] = w["address"]
            lines.append(f"Service {ns}/{name} port {p['port']} → {w['address']}:{target} ({backing[0]})")
    return {"map": mapping, "dns_ip": dns_ip, "lines": lines}


def _tokens(api: str, plan: LabPlan, kdir: Path) -> dict[str, str]:
    """Mint a token per ServiceAccount, per kubelet and per agent pod (projected, audience
    ``kalena``, bound to its node); ``tokens.json`` is what the API server's TokenReview answers from."""
    tokens: dict[str, str] = {}
    table: dict[str, dict[str, Any]] = {}
    for sa in _items(api, "/api/v1/serviceaccounts"):
        ns, name = sa["metadata"]["namespace"], sa["metadata"]["name"]
        token = _token()
        tokens[f"{ns}/{name}"] = token
        table[token] = {"username": f"system:serviceaccount:{ns}:{name}", "groups": ["system:serviceaccounts"]}
    for node in plan.nodes:
        token = _token()
        tokens["kubelet:" + node.name] = token
        table[token] = {"username": f"system:node:{node.name}", "groups": ["system:nodes"]}
    _write_private(kdir / "tokens.json", json.dumps(table))
    return tokens


def _write_private(path: Path, text: str) -> None:
    """Write a file only its owner reads (tokens, kubeconfigs with tokens)."""
    path.touch(mode=0o600)
    path.chmod(0o600)
    path.write_text(text)


def _projected(kdir: Path, tokens: dict[str, str]) -> Callable[[str, str, str], str]:
    def mint(service_account: str, audience: str, node: str) -> str:
        key = f"projected:{service_account}:{audience}:{node}"
        if key not in tokens:
            tokens[key] = _token()
            table = json.loads((kdir / "tokens.json").read_text())
            ns, name = service_account.split("/", 1)
            table[tokens[key]] = {"username": f"system:serviceaccount:{ns}:{name}", "node": node,
                                  "audiences": [audience] if audience else [], "groups": ["system:serviceaccounts"]}
            _write_private(kdir / "tokens.json", json.dumps(table))
        return tokens[key]
    return mint


def _cluster(api: str, workloads: dict[str, dict[str, Any]], tokens: dict[str, str],
             agent_flags: Sequence[str] = ()) -> Cluster:
    config_maps = {f"{c['metadata']['namespace']}/{c['metadata']['name']}": dict(c.get("data") or {})
                   for c in _items(api, "/api/v1/configmaps")}
    secrets_ = {f"{s['metadata']['namespace']}/{s['metadata']['name']}": secret_data(s)
                for s in _items(api, "/api/v1/secrets")}
    services = {f"{s['metadata']['namespace']}/{s['metadata']['name']}": s for s in _items(api, "/api/v1/services")}
    return Cluster(config_maps=config_maps, secrets=secrets_, services=services, workloads=workloads, api_url=api,
                   tokens=tokens, projected_token=lambda *a: "", agent_flags=tuple(agent_flags))


def control_plane_processes(api: str, cluster: Cluster, kdir: Path, *, replicas_cap: int = 1) -> list[Process]:
    """The control plane's Deployments and Jobs of namespace ``kalena``, in :data:`CONTROL_PLANE`
    order, as processes (one per Deployment up to ``replicas_cap``)."""
    cluster.projected_token = _projected(kdir, cluster.tokens)
    out: list[Process] = []
    for kind, path in (("Job", "/apis/batch/v1/namespaces/kalena/jobs"),
                       ("Deployment", "/apis/apps/v1/namespaces/kalena/deployments")):
        for obj in _items(api, path):
            key = f"kalena/{obj['metadata']['name']}"
            placement = Placement(address=cluster.workloads[key]["address"], directory=str(kdir / "pods" / obj["metadata"]["name"]))
            out += derive(cluster, obj, kind, placement, name=obj["metadata"]["name"], replicas_cap=replicas_cap)
    order = {n: i for i, n in enumerate(CONTROL_PLANE)}
    return sorted(out, key=lambda p: order.get(p.name, len(order)))


def agent_processes(api: str, cluster: Cluster, nodes: list[dict[str, Any]]) -> list[Process]:
    """The agent DaemonSet(s) of namespace ``kalena-system``: one process per node."""
    out: list[Process] = []
    for ds in _items(api, "/apis/apps/v1/namespaces/kalena-system/daemonsets"):
        for record in nodes:
            placement = Placement(address=record["address"], directory=str(Path(record["directory"]) / "agent-pod"),
                                  node=record)
            for p in derive(cluster, ds, "DaemonSet", placement, name=f"{ds['metadata']['name']}-{record['name']}"):
                p.substitutions.append(f"the DaemonSet's pod on {record['name']} → a placeholder container (the kubelet "
                                       "double runs `sleep` for Kalena's images; its requests count against "
                                       "allocatable); the agent runs as this process, inside the pod's cgroup "
                                       "(its memory and cpu count in the pod and the node)")
                out.append(p)
    return out


def _materialise(p: Process, api: str, tokens: dict[str, str]) -> None:
    """Write the process's mounted files, its kubeconfig and its directories."""
    Path(p.directory).mkdir(parents=True, exist_ok=True)
    for path, content in p.files.items():
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        Path(path).write_bytes(content)
        Path(path).chmod(0o600)
    for key in ("KALENA_VAR_DIR", "KALENA_HEARTBEAT_DIR"):
        if key in p.env:
            Path(p.env[key]).mkdir(parents=True, exist_ok=True)
    (Path(p.directory) / "fs" / "tmp").mkdir(parents=True, exist_ok=True)
    for word in p.argv:
        value = word.partition("=")[2] or word
        if value.startswith(p.directory) and not Path(value).suffix and value not in p.files and \
                not value.startswith(f"{p.directory}/fs/tmp/") and \
                not Path(value).exists():
            Path(value).mkdir(parents=True, exist_ok=True)
    if "KUBECONFIG" in p.env:
        token_path = next((f for f in p.files if f.endswith("serviceaccount/token")), None)
        token = Path(token_path).read_text() if token_path else ""
        _write_private(Path(p.env["KUBECONFIG"]), kubeconfig_text(api, token))
    p.env["HOME"] = p.directory


def _run_job(p: Process, log: Path, say: Callable[[str], None]) -> None:
    """A Job's container to completion, retried up to ``backoffLimit`` times."""
    for attempt in range(p.backoff_limit + 1):
        with open(log, "ab") as out:
            done = subprocess.run(p.argv, env=p.env, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT, check=False,
                                  timeout=600)
        if done.returncode == 0:
            say(f"kalena lab: {p.workload} completed")
            return
        say(f"kalena lab: {p.workload} failed (exit {done.returncode}), attempt {attempt + 1}")
    raise LabError(f"failed {p.backoff_limit + 1} times (see {log})", source=p.workload, field="backoffLimit")


def _tokenreview_cluster(cluster: Cluster) -> str:
    return (cluster.config_maps.get("kalena/kalena-config") or {}).get("KALENA_AGENT_TOKENREVIEW_CLUSTER") or "lab"


def _wait_node(api: str, name: str, proc: subprocess.Popen, log: Path, timeout_s: float = 60.0) -> None:
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        if proc.poll() is not None:
            raise LabError(f"exited with {proc.returncode} (see {log})", source=f"kubelet of {name}", field="process")
        try:
            _api(f"{api}/api/v1/nodes/{name}")
            return
        except (urllib.error.HTTPError, OSError):
            time.sleep(0.5)
    raise LabError(f"did not register Node {name} within {timeout_s:.0f} s (see {log})", source=f"kubelet of {name}",
                   field="node")


# -- down ------------------------------------------------------------------------------------------

def lab_down_kubernetes(state_dir: Path, *, say: Callable[[str], None] = print) -> list[str]:
    """Stop the Kubernetes-mode lab: agents, kubelets, the control plane's processes, the API
    server, then the nodes as :func:`agents.lab.lab.lab_down` does; drop the lab's database.
    Returns what is left (empty: nothing; the record is then removed).

    Raises:
        LabError: no lab is recorded there.
    """
    state_dir, state = recorded(state_dir)
    for record in state["nodes"]:
        stop(record.get("agent"))
    for record in reversed(state.get("processes", [])):
        stop(record.get("process"))
    for record in state["nodes"]:
        stop(record.get("kubelet"))
    stop(state["apiserver"].get("process"))
    left = kubernetes_leftovers(state)
    if left:
        for line in left:
            say(f"kalena lab: left behind: {line}")
        return left
    database = state.get("database") or {}
    try:
        drop_database(database.get("server", ""), database.get("created", ""))
    except Exception as exc:  # noqa: BLE001 - reported; the rest still comes down
        say(f"kalena lab: could not drop database {database.get('created')}: {exc}")
        left.append(f"database {database.get('created')}")
    left += lab_down(state_dir, say=say)
    if not left:
        shutil.rmtree(state["directory"], ignore_errors=True)
    return left


def kubernetes_leftovers(state: dict[str, Any]) -> list[str]:
    """The Kubernetes mode's own processes and ports still present (the nodes' are
    :func:`agents.lab.lab.leftovers`')."""
    out = []
    named = [("API server", state["apiserver"].get("process"))]
    named += [(f"{r['workload']} ({r['container']})", r.get("process")) for r in state.get("processes", [])]
    named += [(f"kubelet of {r['name']}", r.get("kubelet")) for r in state["nodes"]]
    out += [f"{what} (pid {ref['pid']})" for what, ref in named if alive(ref)]
    if not port_free(state["apiserver"]["address"], state["apiserver"]["port"]):
        out.append(f"port {state['apiserver']['address']}:{state['apiserver']['port']}")
    for r in state["nodes"]:
        if not port_free(r["address"], KUBELET_PORT):
            out.append(f"port {r['address']}:{KUBELET_PORT}")
    for r in state.get("processes", []):
        for port in (8000, 8443):
            if not port_free(r["address"], port):
                out.append(f"port {r['address']}:{port}")
    return sorted(set(out))


def kubernetes_substitutions(state: dict[str, Any]) -> list[str]:
    """Every substitution the lab made for a real cluster, one line each (``kalena lab status``)."""
    out = [f"API server: the test API server on {state['apiserver']['url']} (kubectl: KUBECONFIG={state['kubeconfig']})",
           f"machines: cgroup subtrees /sys/fs/cgroup/{{cpu,cpuacct,memory,cpuset,unified}}/{state['cgroup_root']}/<node>",
           *state.get("substitutions", [])]
    for r in state.get("processes", []):
        out.append(f"{r['workload']} ({r['container']}): a process on {r['address']}")
        out += [f"    {line}" for line in r.get("substitutions") or []]
        if r.get("ignored"):
            out.append(f"    not applied: {', '.join(r['ignored'])}")
    for r in state["nodes"]:
        out.append(f"{r['name']}: host address → {r['address']}; capacity → cpu quota {r['cpu_mcpu']} m, memory limit "
                   f"{r['memory_bytes'] // 2**20} MiB; kubelet → the kubelet double on {r.get('kubelet_url')} running "
                   f"pods on dockerd {r['socket']} (cgroup parent /{r['cgroup']})")
        if r.get("agent_substitutions"):
            out.append(f"{r['name']}: DaemonSet kalena-system/kalena-agent (agent): a process on {r['address']}")
            out += [f"    {line}" for line in r["agent_substitutions"]]
            if r.get("agent_ignored"):
                out.append(f"    not applied: {', '.join(r['agent_ignored'])}")
    return out
