"""The hooks listener as an attacker and as Kubernetes meet it: the real `kalena serve --tls-port`
process (extender mode, `KALENA_ORCHESTRATOR=kubernetes` against the test API server), reached
over real TLS sockets with certificates the test makes.

* the console's port routes nothing under /kubernetes/; the hooks port serves nothing else;
* an anonymous caller and a caller with another CA's certificate fail the TLS handshake on every
  hook, and nothing is bound;
* a caller with the right certificate still cannot bind a pod by the wrong uid, a pod Kalena does
  not manage (another namespace's production pod), or onto a node the filter refuses;
* the TLS settings: AES128-SHA (no forward secrecy) refused, TLS 1.2 ECDHE-RSA-AES128-GCM-SHA256
  accepted, TLS 1.3 negotiated when offered;
* every refusal is counted in ``kalena_hooks_refused_total`` and audited with who and from where.
"""

from __future__ import annotations

import json
import socket
import sqlite3
import ssl
import time
from pathlib import Path

import httpx
import pytest
import yaml

from agents.orchestrators.kubernetes.testserver import TestAPIServer, node, pod
from kalena_web.cli.benchenv import free_port
from tests.web.live_cluster import NODES
from tests.web.webhook_server import Hooks, start_webhook, stop

#: What the ingress adds to every console request (KALENA_HTTPS trusts it).
BEHIND_INGRESS = {"X-Forwarded-Proto": "https"}
HOOK_PATHS = ["/kubernetes/admission/mutate", "/kubernetes/extender/home/filter",
              "/kubernetes/extender/home/prioritize", "/kubernetes/extender/home/bind"]


@pytest.fixture(scope="module")
def kube_api():
    with TestAPIServer() as api:
        for name in NODES:
            api.create("nodes", node(name, cpu="16", memory="64Gi"))
        yield api


@pytest.fixture(scope="module")
def hooks(kube_api, tmp_path_factory, kuberina_dir: Path):
    tmp = tmp_path_factory.mktemp("hooks")
    kubeconfig = tmp / "kubeconfig"
    kubeconfig.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "t",
        "clusters": [{"name": "t", "cluster": {"server": kube_api.url}}],
        "contexts": [{"name": "t", "context": {"cluster": "t", "user": "u"}}], "users": [{"name": "u", "user": {}}]}))
    seed = (  # the homelab as the live cluster "home", every node fresh
        "import time\nfrom pathlib import Path\n"
        "from tests.web.live_cluster import import_homelab\n"
        "from kalena_web.ledger.models import LiveNodeLedger\n"
        f"cluster = import_homelab(Path({str(kuberina_dir)!r}), Path({str(tmp)!r}), now_s=time.time())\n"
        "LiveNodeLedger.objects.filter(node__cluster=cluster).update(stale=False, last_sample_s=time.time())\n")
    # as deploy/kubernetes/control-plane.yaml runs it: HTTPS mode behind the ingress
    server = start_webhook(tmp, free_port(), free_port(), seed=seed, KALENA_ORCHESTRATOR="kubernetes",
                           KUBECONFIG=str(kubeconfig), KALENA_ADMISSION_EXTENDER_MODE="1", KALENA_HTTPS="1",
                           KALENA_HOOKS_AUDIT_COALESCE_S="0")  # each refusal audited: the tests read each
    try:
        httpx.post(server.mutate_url, content=b"{}", timeout=60, verify=server.client())  # warm up
        yield server
    finally:
        stop(server)


def refused(hooks: Hooks, endpoint: str, reason: str) -> float:
    """``kalena_hooks_refused_total{endpoint, reason}`` as the server stored it."""
    with sqlite3.connect(hooks.db_path) as db:
        row = db.execute("SELECT count FROM control_metricseries WHERE name = 'kalena_hooks_refused' AND key = ?",
                         (f'kalena_hooks_refused{{"endpoint":"{endpoint}","reason":"{reason}"}}',)).fetchone()
    return row[0] if row else 0.0


def audited(hooks: Hooks, reason: str) -> list[tuple[str, dict]]:
    """``(actor, after)`` of the ``hooks.refused`` audit entries with ``reason``."""
    with sqlite3.connect(hooks.db_path) as db:
        rows = db.execute("SELECT actor, after FROM policy_auditentry WHERE action = 'hooks.refused'").fetchall()
    return [(actor, after) for actor, after in ((a, json.loads(b)) for a, b in rows) if after["reason"] == reason]


def wait_until(check, what: str, timeout_s: float = 30.0):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        got = check()
        if got:
            return got
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def batch_pod(kube_api, name: str, **kw) -> dict:
    """A Job's batch pod as kube-scheduler sees it in extender mode (default scheduler, tier label)."""
    return kube_api.create("pods", pod("batch", name, tier="batch", owner_kind="Job", owner_name=name.rsplit("-", 1)[0],
                                       scheduler="default-scheduler", **kw))


def binding(created: dict, node_name: str, uid: str | None = None) -> dict:
    meta = created["metadata"]
    return {"PodName": meta["name"], "PodNamespace": meta["namespace"],
            "PodUID": meta["uid"] if uid is None else uid, "Node": node_name}


def node_of(kube_api, created: dict) -> str:
    meta = created["metadata"]
    return kube_api.get("pods", f"{meta['namespace']}/{meta['name']}")["spec"].get("nodeName") or ""


def extender_args(created: dict) -> dict:
    return {"Pod": created, "NodeNames": NODES}


# -- which port serves what ------------------------------------------------------------------------

@pytest.mark.parametrize("path", HOOK_PATHS)
def test_console_port_serves_no_hook(hooks, kube_api, path):
    created = batch_pod(kube_api, f"console-{path.rsplit('/', 1)[1]}-0")
    body = binding(created, NODES[0]) if path.endswith("/bind") else extender_args(created)
    response = httpx.post(hooks.console_url + path, json=body, headers=BEHIND_INGRESS, timeout=30)
    assert response.status_code == 404
    assert node_of(kube_api, created) == ""
    direct = httpx.post(hooks.console_url + path, json=body, timeout=30)  # plain HTTP: sent to HTTPS
    assert direct.status_code == 301 and node_of(kube_api, created) == ""


@pytest.mark.parametrize("path", ["/metrics", "/metrics/cluster", "/api/v1/clusters", "/", "/accounts/login/",
                                  "/livez", "/static/console/favicon.svg"])
def test_hooks_port_serves_nothing_else(hooks, path):
    # even a caller with a good certificate gets only the hooks there
    response = httpx.get(hooks.url + path, verify=hooks.client(), timeout=30)
    assert response.status_code == 404 and "serves only /kubernetes/" in response.json()["detail"]
    assert wait_until(lambda: any(a["detail"].endswith(path) and actor.startswith("CN=kube-scheduler")
                                  for actor, a in audited(hooks, "not_a_hook")), "the audit entry")


# -- who may call ------------------------------------------------------------------------------------

@pytest.mark.parametrize("caller, reason", [("anonymous", "no_client_certificate"),
                                            ("wrong-certificate", "bad_client_certificate")])
@pytest.mark.parametrize("path", HOOK_PATHS)
def test_unauthenticated_caller_fails_the_handshake(hooks, kube_api, path, caller, reason):
    created = batch_pod(kube_api, f"{caller}-{path.rsplit('/', 1)[1]}-0")
    body = binding(created, NODES[0]) if path.endswith("/bind") else extender_args(created)
    before = refused(hooks, "tls", reason)
    context = hooks.context() if caller == "anonymous" else hooks.rogue()
    with pytest.raises((httpx.TransportError, ssl.SSLError)):
        httpx.post(hooks.url + path, json=body, verify=context, timeout=30)
    assert node_of(kube_api, created) == ""
    wait_until(lambda: refused(hooks, "tls", reason) >= before + 1, f"the {reason} count")
    who = [actor for actor, after in audited(hooks, reason)]
    assert all(a == "anonymous" for a in who) if caller == "anonymous" else any("CN=impostor" in a for a in who)
    assert all(after["peer"].startswith("127.0.0.1:") for _, after in audited(hooks, reason))


def test_bind_with_the_wrong_uid_is_refused(hooks, kube_api):
    created = batch_pod(kube_api, "wronguid-0")
    before = refused(hooks, "bind", "uid_mismatch")
    response = httpx.post(hooks.url + "/kubernetes/extender/home/bind", verify=hooks.client(), timeout=30,
                          json=binding(created, NODES[0], uid="3f1c2b9a-0000-4000-8000-000000000000"))
    assert response.status_code == 403 and "has uid" in response.json()["Error"]
    assert node_of(kube_api, created) == ""
    assert refused(hooks, "bind", "uid_mismatch") == before + 1
    actor, after = audited(hooks, "uid_mismatch")[-1]
    assert actor.startswith("CN=kube-scheduler") and after["peer"].startswith("127.0.0.1:")
    missing = httpx.post(hooks.url + "/kubernetes/extender/home/bind", verify=hooks.client(), timeout=30,
                         json=binding(created, NODES[0], uid=""))
    assert "PodUID" in missing.json()["Error"] and node_of(kube_api, created) == ""


def test_bind_of_a_pod_kalena_does_not_manage_is_refused(hooks, kube_api):
    # another namespace's production pod, as its ReplicaSet makes it, pending for the default scheduler
    created = kube_api.create("pods", pod("payments", "api-7d9c5b6f4-x2k9q", owner_kind="ReplicaSet",
                                          owner_name="api-7d9c5b6f4", labels={"pod-template-hash": "7d9c5b6f4"}))
    response = httpx.post(hooks.url + "/kubernetes/extender/home/bind", json=binding(created, NODES[1]),
                          verify=hooks.client(), timeout=30)
    assert response.status_code == 403 and "not managed by Kalena" in response.json()["Error"]
    assert node_of(kube_api, created) == ""
    for verb in ("filter", "prioritize"):
        answer = httpx.post(hooks.url + f"/kubernetes/extender/home/{verb}", json=extender_args(created),
                            verify=hooks.client(), timeout=30)
        assert answer.status_code == 403
    assert refused(hooks, "filter", "unmanaged") >= 1 and refused(hooks, "prioritize", "unmanaged") >= 1


def test_bind_of_a_pod_labelled_production_is_refused_whatever_it_requests(hooks, kube_api):
    # a production pod — its tier label says so — whose spec also asks for Kalena's batch
    # resources (copied from a batch pod's): its label decides, it is not Kalena's to bind
    spec = pod("payments", "ledger-5b7f9c8d6-q4w2e", tier="production", owner_kind="ReplicaSet",
               owner_name="ledger-5b7f9c8d6", labels={"pod-template-hash": "5b7f9c8d6"}, scheduler="default-scheduler")
    resources = spec["spec"]["containers"][0]["resources"]
    for block in ("requests", "limits"):
        resources[block].update({"kalena.naughtian.io/batch-cpu": "500", "kalena.naughtian.io/batch-memory": "1073741824"})
    created = kube_api.create("pods", spec)
    response = httpx.post(hooks.url + "/kubernetes/extender/home/bind", json=binding(created, NODES[1]),
                          verify=hooks.client(), timeout=30)
    assert response.status_code == 403 and "not managed by Kalena" in response.json()["Error"], response.text
    assert node_of(kube_api, created) == ""


def test_bind_the_filter_refuses_is_refused(hooks, kube_api):
    created = batch_pod(kube_api, "huge-0", cpu="100", limit_cpu="100")
    filtered = httpx.post(hooks.url + "/kubernetes/extender/home/filter", json=extender_args(created),
                          verify=hooks.client(), timeout=30).json()
    assert filtered["NodeNames"] == []
    response = httpx.post(hooks.url + "/kubernetes/extender/home/bind", json=binding(created, NODES[0]),
                          verify=hooks.client(), timeout=30)
    assert response.json()["Error"].startswith("kalena extender: the filter refuses node")
    assert node_of(kube_api, created) == ""
    assert refused(hooks, "bind", "filter") >= 1


def test_filter_without_the_pods_uid_is_refused(hooks, kube_api):
    created = batch_pod(kube_api, "nouid-0")
    anonymous_pod = {**created, "metadata": {k: v for k, v in created["metadata"].items() if k != "uid"}}
    response = httpx.post(hooks.url + "/kubernetes/extender/home/filter", json=extender_args(anonymous_pod),
                          verify=hooks.client(), timeout=30)
    assert response.status_code == 400 and "Pod.metadata.uid" in response.json()["Error"]


def test_only_kube_schedulers_certificate_binds(hooks, kube_api):
    created = batch_pod(kube_api, "train-0")
    with pytest.raises((httpx.TransportError, ssl.SSLError)):  # the same calls without the certificate
        httpx.post(hooks.url + "/kubernetes/extender/home/bind", json=binding(created, NODES[2]),
                   verify=hooks.context(), timeout=30)
    assert node_of(kube_api, created) == ""
    with httpx.Client(base_url=hooks.url, verify=hooks.client(), timeout=30) as scheduler:
        filtered = scheduler.post("/kubernetes/extender/home/filter", json=extender_args(created)).json()
        assert filtered["Error"] == "" and sorted(filtered["NodeNames"]) == sorted(NODES)
        assert len(scheduler.post("/kubernetes/extender/home/prioritize", json=extender_args(created)).json()) == 3
        assert scheduler.post("/kubernetes/extender/home/bind", json=binding(created, NODES[2])).json() == {"Error": ""}
    assert node_of(kube_api, created) == NODES[2]


def test_refusals_are_in_the_metrics(hooks):
    httpx.post(hooks.url + "/kubernetes/extender/home/bind", verify=hooks.client(), timeout=30,
               json={"PodName": "ghost", "PodNamespace": "batch", "PodUID": "u", "Node": "nowhere"})
    text = httpx.get(hooks.console_url + "/metrics/cluster", headers=BEHIND_INGRESS, timeout=30).text
    assert 'kalena_hooks_refused_total{endpoint="bind",reason="unknown_node"} 1.0' in text


# -- TLS settings ------------------------------------------------------------------------------------

def handshake(hooks: Hooks, *, maximum=None, ciphers: str = "") -> tuple[str, str]:
    context = hooks.client()
    if maximum is not None:
        context.maximum_version = maximum
    if ciphers:
        context.set_ciphers(ciphers)
    port = int(hooks.url.rsplit(":", 1)[1])
    with socket.create_connection(("127.0.0.1", port), timeout=30) as raw, \
            context.wrap_socket(raw, server_hostname="127.0.0.1") as tls:
        tls.sendall(b"GET /kubernetes/admission/mutate HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
        assert tls.recv(12).startswith(b"HTTP/1.1 405")
        return tls.version(), tls.cipher()[0]


@pytest.mark.parametrize("suite", ["AES128-SHA", "AES256-GCM-SHA384", "ECDHE-RSA-AES128-SHA"],
                         ids=["no-forward-secrecy", "rsa-key-exchange", "cbc"])
def test_tls12_accepts_only_forward_secret_aead_suites(hooks, suite):
    before = refused(hooks, "tls", "handshake")
    with pytest.raises(ssl.SSLError):
        handshake(hooks, maximum=ssl.TLSVersion.TLSv1_2, ciphers=suite)
    wait_until(lambda: refused(hooks, "tls", "handshake") >= before + 1, "the handshake refusal count")
    # the same client with an ECDHE AEAD suite gets in
    assert handshake(hooks, maximum=ssl.TLSVersion.TLSv1_2, ciphers="ECDHE-RSA-AES128-GCM-SHA256") == (
        "TLSv1.2", "ECDHE-RSA-AES128-GCM-SHA256")
    # and a client offering TLS 1.3 negotiates it
    assert handshake(hooks)[0] == "TLSv1.3"


# -- bad configuration -------------------------------------------------------------------------------

def test_serve_refuses_a_hooks_port_without_client_authentication_or_with_a_bad_ca(hooks, tmp_path):
    import os
    import subprocess
    import sys

    from tests.web.webhook_server import ROOT

    def serve(*extra: str) -> subprocess.CompletedProcess:
        tls = ["--tls-cert", str(Path(hooks.ca).with_name("tls.crt")), "--tls-key", str(Path(hooks.ca).with_name("tls.key"))]
        return subprocess.run([sys.executable, "-m", "kalena_web.cli", "serve", "--port", str(free_port()), "--no-loops",
                               "--tls-port", str(free_port()), *tls, *extra], cwd=ROOT, capture_output=True, text=True,
                              timeout=120, env={**{k: v for k, v in os.environ.items() if k != "DATABASE_URL"},
                                                "KALENA_DB_PATH": str(tmp_path / "k.sqlite3"),
                                                "KALENA_VAR_DIR": str(tmp_path / "var")})

    missing = serve()  # no --tls-client-ca: the hooks would answer anyone
    assert missing.returncode == 2 and "--tls-port needs --tls-cert, --tls-key and --tls-client-ca" in missing.stderr
    (tmp_path / "ca.crt").write_text("not a certificate\n")
    bad = serve("--tls-client-ca", str(tmp_path / "ca.crt"))
    assert bad.returncode == 2 and f"--tls-client-ca {tmp_path / 'ca.crt'}:" in bad.stderr


def test_the_hooks_can_listen_where_the_console_does_not(tmp_path):
    """``--tls-host``: the scheduler's pods (deploy/kubernetes/control-plane.yaml) serve the hooks to
    the cluster while their console port, which holds the scheduler's credentials, answers only the
    pod itself (its probes). Two loopback addresses stand for the pod's own and its cluster IP."""
    console_port, hooks_port = free_port(), free_port()
    server = start_webhook(tmp_path, console_port, hooks_port, tls_host="127.0.0.2")
    try:
        def answers(host: str, port: int) -> bool:
            try:
                socket.create_connection((host, port), timeout=2).close()
                return True
            except OSError:
                return False

        assert answers("127.0.0.2", hooks_port) and answers("127.0.0.1", console_port)
        assert not answers("127.0.0.2", console_port)   # the console is not served where the hooks are
        assert not answers("127.0.0.1", hooks_port)
        assert httpx.get(f"http://127.0.0.1:{console_port}/livez", timeout=30).status_code == 200
    finally:
        stop(server)
