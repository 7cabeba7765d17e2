"""deploy/kubernetes works as written: every built-in object validates (strict: no unknown field)
against the Kubernetes 1.33 schemas with kubernetes-validate (offline), and the objects refer to
each other correctly — the console and the scheduler run apart under their own ServiceAccounts,
the webhook's Service reaches the scheduler's TLS port, its path is the webhook view (on the hooks
listener's URL map, never the console's), its certificate names the Service, the hooks' callers
present client certificates from the CA the scheduler trusts, the
agent's link URL names the Service that exists and the WebSocket route, the extender's URL names
real views; and `manage.py check --deploy` passes with the settings the files set."""

from __future__ import annotations

import ipaddress
import os
import secrets
import subprocess
import sys
from pathlib import Path
from urllib.parse import urlparse

import kubernetes_validate
import pytest
import yaml
from django.urls import Resolver404, resolve

from kalena_web.cli import build_parser
from kalena_web.kubehooks.routing import HOOKS_URLCONF

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
FILES = ["kubernetes/control-plane.yaml", "kubernetes/webhook.yaml", "kubernetes/webhook-infer-jobs.yaml",
         "kubernetes/scheduler-extender.yaml", "kubernetes/apiserver-admission.yaml", "agent/daemonset.yaml"]
#: Kinds from outside core Kubernetes (no schema in kubernetes-validate): checked by the tests below.
FOREIGN = {("cert-manager.io/v1", "Issuer"), ("cert-manager.io/v1", "Certificate"),
           ("kubescheduler.config.k8s.io/v1", "KubeSchedulerConfiguration"),
           ("apiserver.config.k8s.io/v1", "AdmissionConfiguration"), ("v1", "Config")}


def docs(name: str) -> list[dict]:
    return [d for d in yaml.safe_load_all((DEPLOY / name).read_text()) if d]


def every() -> list[tuple[str, dict]]:
    return [(f, d) for f in FILES for d in docs(f)]


@pytest.mark.parametrize("name, doc", every(), ids=[f"{f}:{d['kind']}/{d['metadata'].get('name', '')}"
                                                    if "metadata" in d else f"{f}:{d['kind']}" for f, d in every()])
def test_validates_against_kubernetes_1_33(name, doc):
    if (doc["apiVersion"], doc["kind"]) in FOREIGN:
        return
    kubernetes_validate.validate(doc, "1.33.0", strict=True)  # raises ValidationError naming the field


def find(name: str, kind: str, obj_name: str) -> dict:
    return next(d for d in docs(name) if d["kind"] == kind and d["metadata"]["name"] == obj_name)


def workload(name: str) -> tuple[dict, dict]:
    deployment = find("kubernetes/control-plane.yaml", "Deployment", name)
    return deployment, deployment["spec"]["template"]["spec"]["containers"][0]


def console() -> tuple[dict, dict]:
    return workload("kalena-console")


def scheduler() -> tuple[dict, dict]:
    return workload("kalena-scheduler")


def test_console_and_scheduler_run_apart_each_with_its_own_service_account():
    """The internet-facing console runs no watch, no scheduling and no hooks port, under an account
    that may only create TokenReviews, and forwards pod stops to the workers; the scheduler (watch
    + Lease + hooks) and the workers hold the scheduler's account (tests/web/kubernetes/test_rbac.py:
    each exactly what it calls)."""
    deployment, container = console()
    args = build_parser().parse_args(container["args"])
    assert deployment["spec"]["template"]["spec"]["serviceAccountName"] == "kalena-console"
    assert args.command == "serve" and args.no_loops and args.tls_port is None
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["KALENA_ORCHESTRATOR_THROUGH_WORKERS"] == "1"
    deployment, container = scheduler()
    args = build_parser().parse_args(container["args"])
    assert deployment["spec"]["template"]["spec"]["serviceAccountName"] == "kalena-scheduler"
    assert args.command == "serve" and not args.no_loops and args.tls_port == 8443  # the watch runs here
    # its console port holds the scheduler's credentials: the pod's loopback only, probed from inside
    assert (args.host, args.tls_host) == ("127.0.0.1", "0.0.0.0")
    assert [p["containerPort"] for p in container["ports"]] == [args.tls_port]
    for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
        command = container[probe]["exec"]["command"]
        assert command[:3] == ["kalena", "probe", "url"] and command[3].startswith(f"http://127.0.0.1:{args.port}/")
    assert "KALENA_ORCHESTRATOR_THROUGH_WORKERS" not in {e["name"] for e in container.get("env", [])}
    worker, _ = workload("kalena-worker")
    assert worker["spec"]["template"]["spec"]["serviceAccountName"] == "kalena-scheduler"
    config = find("kubernetes/control-plane.yaml", "ConfigMap", "kalena-config")["data"]
    assert "KALENA_ORCHESTRATOR_THROUGH_WORKERS" not in config  # the workers stop pods themselves
    labels = deployment["spec"]["template"]["metadata"]["labels"]
    for service in (d for f in FILES for d in docs(f) if d["kind"] == "Service"):
        if service["spec"]["selector"].items() <= labels.items():  # the scheduler: only its hooks port
            assert [p["targetPort"] for p in service["spec"]["ports"]] == ["https"], service["metadata"]["name"]
    ingress = find("kubernetes/control-plane.yaml", "Ingress", "kalena")
    backends = {p["backend"]["service"]["name"] for r in ingress["spec"]["rules"] for p in r["http"]["paths"]}
    assert backends == {"kalena"} and find("kubernetes/control-plane.yaml", "Service", "kalena")["spec"][
        "selector"] == {"app": "kalena-console"}


def test_webhook_reaches_the_scheduler_over_tls():
    deployment, container = scheduler()
    args = build_parser().parse_args(container["args"])
    service = find("kubernetes/webhook.yaml", "Service", "kalena-webhook")
    assert service["spec"]["selector"].items() <= deployment["spec"]["template"]["metadata"]["labels"].items()
    (port,) = service["spec"]["ports"]
    named = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert named[port["targetPort"]] == args.tls_port == 8443
    for config in ("kubernetes/webhook.yaml", "kubernetes/webhook-infer-jobs.yaml"):
        for hook in find(config, "MutatingWebhookConfiguration", "kalena" if "infer" not in config
                         else "kalena-infer-jobs")["webhooks"]:
            ref = hook["clientConfig"]["service"]
            assert (ref["name"], ref["namespace"], ref["port"]) == ("kalena-webhook", "kalena", port["port"])
            assert resolve(ref["path"], urlconf=HOOKS_URLCONF).url_name == "mutate"
            with pytest.raises(Resolver404):  # the console's port routes no hook
                resolve(ref["path"])
            assert hook["failurePolicy"] == "Ignore" and hook["sideEffects"] == "None"
            labels = hook["objectSelector"].get("matchLabels", {}) | {
                e["key"]: e["operator"] for e in hook["objectSelector"].get("matchExpressions", [])}
            assert "kalena.naughtian.io/tier" in labels
    cert = find("kubernetes/webhook.yaml", "Certificate", "kalena-webhook")
    assert "kalena-webhook.kalena.svc" in cert["spec"]["dnsNames"]
    volumes = {v["name"]: v for v in deployment["spec"]["template"]["spec"]["volumes"]}
    mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
    assert volumes["webhook-tls"]["secret"]["secretName"] == cert["spec"]["secretName"]
    assert args.tls_cert.startswith(mounts["webhook-tls"]) and args.tls_key.startswith(mounts["webhook-tls"])
    allowed = find("kubernetes/control-plane.yaml", "ConfigMap", "kalena-config")["data"]["KALENA_ALLOWED_HOSTS"]
    assert "kalena-webhook.kalena.svc" in allowed.split(",")


def test_agent_link_names_the_service_that_exists():
    (ds,) = [d for d in docs("agent/daemonset.yaml") if d["kind"] == "DaemonSet"]
    container = ds["spec"]["template"]["spec"]["containers"][0]
    url = urlparse(next(a.split("=", 1)[1].split()[0] for a in container["args"] if a.startswith("--link-url=")))
    service_name, namespace = url.hostname.split(".")[:2]
    service = find("kubernetes/control-plane.yaml", "Service", service_name)
    assert service["metadata"]["namespace"] == namespace
    (port,) = service["spec"]["ports"]
    assert (url.port or (443 if url.scheme == "wss" else 80)) == port["port"]
    _, console_container = console()
    named = {p["name"]: p["containerPort"] for p in console_container["ports"]}
    assert named[port["targetPort"]] == build_parser().parse_args(console_container["args"]).port
    assert url.path == "/agent/v1/ws"
    assert "--kube-in-cluster" in container["args"] and not any(a.startswith("--kube-api-url") for a in container["args"])
    volumes = {v["name"]: v for v in ds["spec"]["template"]["spec"]["volumes"]}
    (source,) = volumes["link-token"]["projected"]["sources"]
    assert source["serviceAccountToken"]["audience"] == "kalena"  # KALENA_AGENT_TOKEN_AUDIENCE's default
    assert not any("secret" in v for v in volumes.values())  # no Secret with every node's token


def test_extender_config_names_real_views():
    (config,) = docs("kubernetes/scheduler-extender.yaml")
    (ext,) = config["extenders"]
    prefix = urlparse(ext["urlPrefix"])
    assert prefix.hostname == "kalena-webhook.kalena.svc" and ext["enableHTTPS"] is True
    for verb, name in (("filterVerb", "extender-filter"), ("prioritizeVerb", "extender-prioritize"),
                       ("bindVerb", "extender-bind")):
        assert resolve(f"{prefix.path}/{ext[verb]}", urlconf=HOOKS_URLCONF).url_name == name
    assert ext["nodeCacheCapable"] is True and ext["weight"] >= 1
    assert {r["name"] for r in ext["managedResources"]} == {"kalena.naughtian.io/batch-cpu",
                                                           "kalena.naughtian.io/batch-memory"}


def test_hooks_callers_present_certificates_the_scheduler_trusts():
    deployment, container = scheduler()
    args = build_parser().parse_args(container["args"])
    volumes = {v["name"]: v for v in deployment["spec"]["template"]["spec"]["volumes"]}
    mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
    ca_dir, ca_file = args.tls_client_ca.rsplit("/", 1)
    ca_volume = volumes[mounts[ca_dir]]["secret"]
    assert ca_volume["items"] == [{"key": "ca.crt", "path": ca_file}]  # the CA's certificate, never its key
    ca_cert = find("kubernetes/webhook.yaml", "Certificate", "kalena-hooks-client-ca")
    assert ca_cert["spec"]["isCA"] is True and ca_cert["spec"]["secretName"] == ca_volume["secretName"]
    ca_issuer = find("kubernetes/webhook.yaml", "Issuer", "kalena-hooks-client-ca")
    assert ca_issuer["spec"]["ca"]["secretName"] == ca_volume["secretName"]
    for name, cn in (("kalena-apiserver-client", "kube-apiserver"), ("kalena-scheduler-client", "kube-scheduler")):
        client = find("kubernetes/webhook.yaml", "Certificate", name)["spec"]
        assert client["issuerRef"]["name"] == ca_issuer["metadata"]["name"] and client["usages"] == ["client auth"]
        assert client["commonName"] == cn
    # kube-scheduler: the extender's tlsConfig sends the client certificate
    (config,) = docs("kubernetes/scheduler-extender.yaml")
    (ext,) = config["extenders"]
    assert ext["enableHTTPS"] is True and ext["tlsConfig"]["certFile"] and ext["tlsConfig"]["keyFile"]
    # kube-apiserver: the AdmissionConfiguration's kubeconfig has a user named after the webhook Service
    admission, kubeconfig = docs("kubernetes/apiserver-admission.yaml")
    (plugin,) = admission["plugins"]
    assert plugin["name"] == "MutatingAdmissionWebhook"
    assert plugin["configuration"]["kubeConfigFile"].startswith("/etc/kubernetes/kalena/")
    service = find("kubernetes/webhook.yaml", "MutatingWebhookConfiguration", "kalena")["webhooks"][0]["clientConfig"]
    (user,) = kubeconfig["users"]
    assert user["name"] == f"{service['service']['name']}.{service['service']['namespace']}.svc"
    assert user["user"]["client-certificate"].startswith("/etc/kubernetes/kalena/") and user["user"]["client-key"]


def test_console_is_https_behind_its_ingress_and_metrics_need_a_token():
    _, container = console()
    config = find("kubernetes/control-plane.yaml", "ConfigMap", "kalena-config")["data"]
    assert config["KALENA_HTTPS"] == "1"
    ingress = find("kubernetes/control-plane.yaml", "Ingress", "kalena")
    (rule,) = ingress["spec"]["rules"]
    assert rule["host"] in ingress["spec"]["tls"][0]["hosts"] and rule["host"] in config["KALENA_ALLOWED_HOSTS"]
    assert f"https://{rule['host']}" in config["KALENA_CSRF_TRUSTED_ORIGINS"].split(",")
    (backend,) = [p["backend"]["service"] for p in rule["http"]["paths"]]
    assert backend["name"] == "kalena"  # the console's Service, never the hooks port
    env = {e["name"]: e for e in container["env"]}
    assert "optional" not in env["KALENA_METRICS_TOKEN"]["valueFrom"]["secretKeyRef"]  # the pod needs it


def test_login_throttling_counts_the_client_behind_the_ingress_not_the_ingress():
    """The Ingress is the console's reverse proxy: the ConfigMap names its header and its pods'
    network, so the throttle counts each client's own address (not the ingress controller's one
    address, for which 20 failures would lock everyone out), never a client's own claim, and a LAN
    client (outside the pod network) is not skipped as a proxy."""
    from kalena_web.console.clients import client_address
    from kalena_web.settings import _trusted_proxies

    config = find("kubernetes/control-plane.yaml", "ConfigMap", "kalena-config")["data"]
    header, networks = _trusted_proxies(config.get("KALENA_TRUSTED_PROXY_HEADER", ""),
                                        config.get("KALENA_TRUSTED_PROXIES", ""))
    assert header == "X-Forwarded-For"  # what ingress controllers set
    ingress_pod = str(ipaddress.ip_network(networks[0])[3 * 256 + 17])  # e.g. 10.244.3.17
    assert client_address(ingress_pod, "203.0.113.5", trusted=networks) == "203.0.113.5"
    assert client_address(ingress_pod, "6.6.6.6, 203.0.113.5", trusted=networks) == "203.0.113.5"
    assert client_address(ingress_pod, "6.6.6.6, 192.168.1.20", trusted=networks) == "192.168.1.20"
    assert client_address("192.168.1.20", "6.6.6.6", trusted=networks) == "192.168.1.20"  # not via the ingress
    for private_lan in ("192.168.0.0/16", "172.16.0.0/12"):  # a home or office network is never a proxy
        assert not any(ipaddress.ip_network(n).overlaps(ipaddress.ip_network(private_lan)) for n in networks)
    compose = yaml.safe_load((DEPLOY / "compose/docker-compose.yml").read_text())["x-kalena-env"]
    assert {"KALENA_TRUSTED_PROXY_HEADER", "KALENA_TRUSTED_PROXIES"} <= set(compose)  # for a proxy in front


def test_manage_py_check_deploy_passes_with_the_deploy_files_settings():
    config = find("kubernetes/control-plane.yaml", "ConfigMap", "kalena-config")["data"]
    secrets_ = {"KALENA_SECRET_KEY": secrets.token_urlsafe(50), "KALENA_METRICS_TOKEN": secrets.token_urlsafe(32),
                "DATABASE_URL": "postgres://kalena:pw@postgres:5432/kalena", "REDIS_URL": "redis://redis:6379/0"}
    # the deploy files' environment, not this test process's (the browser tests' conftest sets
    # DJANGO_ALLOW_ASYNC_UNSAFE for the whole pytest process)
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("KALENA_", "DATABASE_URL", "REDIS_URL", "DJANGO_ALLOW_ASYNC_UNSAFE"))}
    result = subprocess.run([sys.executable, "manage.py", "check", "--deploy", "--fail-level", "WARNING"],
                            env={**env, **config, **secrets_, "DJANGO_SETTINGS_MODULE": "kalena_web.settings"},
                            cwd=DEPLOY.parent, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "no issues" in result.stdout
