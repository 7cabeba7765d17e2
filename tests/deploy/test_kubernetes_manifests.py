"""deploy/kubernetes works as written: every built-in object validates (strict: no unknown field)
against the Kubernetes 1.33 schemas with kubernetes-validate (offline), and the objects refer to
each other correctly — the webhook's Service reaches the console's TLS port, its path is the
webhook view, its certificate names the Service, the agent's link URL names the Service that
exists and the WebSocket route, the extender's URL names real views."""

from __future__ import annotations

from pathlib import Path
from urllib.parse import urlparse

import kubernetes_validate
import pytest
import yaml
from django.urls import resolve

from kalena_web.cli import build_parser

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
FILES = ["kubernetes/control-plane.yaml", "kubernetes/webhook.yaml", "kubernetes/webhook-infer-jobs.yaml",
         "kubernetes/scheduler-extender.yaml", "agent/daemonset.yaml"]
#: Kinds from outside core Kubernetes (no schema in kubernetes-validate): checked by the tests below.
FOREIGN = {("cert-manager.io/v1", "Issuer"), ("cert-manager.io/v1", "Certificate"),
           ("kubescheduler.config.k8s.io/v1", "KubeSchedulerConfiguration")}


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


def console() -> tuple[dict, dict]:
    deployment = find("kubernetes/control-plane.yaml", "Deployment", "kalena-console")
    return deployment, deployment["spec"]["template"]["spec"]["containers"][0]


def test_webhook_reaches_the_console_over_tls():
    deployment, container = console()
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
            assert resolve(ref["path"]).url_name == "mutate"
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
        assert resolve(f"{prefix.path}/{ext[verb]}").url_name == name
    assert ext["nodeCacheCapable"] is True and ext["weight"] >= 1
    assert {r["name"] for r in ext["managedResources"]} == {"kalena.naughtian.io/batch-cpu",
                                                           "kalena.naughtian.io/batch-memory"}
