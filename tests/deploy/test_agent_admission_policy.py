"""The agent's pod writes reach only its own node's pods, enforced by the API server: the
ValidatingAdmissionPolicy ``kalena-agent-own-node`` of deploy/agent/daemonset.yaml, its CEL
evaluated with cel-python against admission.k8s.io/v1 AdmissionRequests shaped as kube-apiserver
sends them (DELETE: ``object`` null, ``oldObject`` the stored pod; a ``pods/status`` PATCH:
operation UPDATE, ``subResource: status``, both objects; an Eviction: CREATE of ``pods``
subresource ``eviction``, ``object`` the Eviction, ``oldObject`` null), with the user a pod-bound
projected token authenticates as (``extra['authentication.kubernetes.io/node-name']``, Kubernetes
≥ 1.30). The pods are the test API server's own, as it stored them.

How the API server applies the policy, as modelled here (Kubernetes docs, "Validating Admission
Policy"): a request is in scope when a ``resourceRules`` entry names its group, version,
operation and resource (``pods/status`` for a subresource); then every ``matchConditions``
expression must be true; ``variables`` are evaluated in order into ``variables``; each
validation that is false — or fails to evaluate, with ``failurePolicy: Fail`` — denies the request
with its message (``messageExpression`` evaluated)."""

from __future__ import annotations

import copy
from pathlib import Path

import celpy
import pytest
import yaml

from agents.enforcer import disruption_patch
from agents.orchestrators.kubernetes.rbac import granted
from agents.orchestrators.kubernetes.teststore import strategic_merge_patch
from agents.orchestrators.kubernetes.testserver import TestAPIServer, node, pod

DAEMONSET = Path(__file__).resolve().parents[2] / "deploy" / "agent" / "daemonset.yaml"
AGENT = "system:serviceaccount:kalena-system:kalena-agent"
NODE_NAME = "authentication.kubernetes.io/node-name"


def manifest(kind: str) -> dict:
    (doc,) = [d for d in yaml.safe_load_all(DAEMONSET.read_text()) if d and d["kind"] == kind]
    return doc


def user(name: str = AGENT, node_names: list[str] | None = None) -> dict:
    """The userInfo kube-apiserver builds for a pod-bound service-account token (pod name and uid,
    node name and uid, the credential id), or without the node claim (``node_names=None``)."""
    extra = {"authentication.kubernetes.io/pod-name": ["kalena-agent-x7k2p"],
             "authentication.kubernetes.io/pod-uid": ["5b1c3e0a-0f8e-4a52-9b7e-2d1f6c0e9a11"],
             "authentication.kubernetes.io/credential-id": ["JTI=0b8f1c9e-3a44-4d1b-a0a7-77e0c9f6e2d4"]}
    if node_names is not None:
        extra |= {NODE_NAME: node_names, "authentication.kubernetes.io/node-uid": ["uid-" + n for n in node_names]}
    return {"username": name, "uid": "0e7d3b2a-1c55-4f0e-8a6b-3d2c1b0a9f88",
            "groups": ["system:serviceaccounts", "system:serviceaccounts:kalena-system", "system:authenticated"],
            "extra": extra}


def request(operation: str, target: dict, userinfo: dict, *, sub: str = "", obj: dict | None = None) -> dict:
    """An AdmissionRequest about pod ``target`` (the stored object)."""
    meta = target["metadata"]
    kind = {"group": "policy", "version": "v1", "kind": "Eviction"} if sub == "eviction" else \
        {"group": "", "version": "v1", "kind": "Pod"}
    options = {"apiVersion": "meta.k8s.io/v1", "kind": {"DELETE": "DeleteOptions", "CREATE": "CreateOptions"}.get(
        operation, "UpdateOptions")}
    return {"uid": "705ab4f5-6393-11e8-b7cc-42010a800002", "kind": kind, "requestKind": kind,
            "resource": {"group": "", "version": "v1", "resource": "pods"},
            "requestResource": {"group": "", "version": "v1", "resource": "pods"},
            "subResource": sub, "requestSubResource": sub, "name": meta["name"], "namespace": meta["namespace"],
            "operation": operation, "userInfo": userinfo, "dryRun": False, "options": options,
            "object": obj, "oldObject": None if operation == "CREATE" else target}


def delete(target, userinfo):
    return request("DELETE", target, userinfo)


def mark(target, userinfo):
    """The agent's status patch (the DisruptionTarget condition) as the UPDATE the API server admits."""
    return request("UPDATE", target, userinfo, sub="status",
                   obj=strategic_merge_patch(copy.deepcopy(target), disruption_patch()))


def evict(target, userinfo):
    meta = target["metadata"]
    eviction = {"apiVersion": "policy/v1", "kind": "Eviction",
                "metadata": {"name": meta["name"], "namespace": meta["namespace"]},
                "deleteOptions": {"gracePeriodSeconds": 30}}
    return request("CREATE", target, userinfo, sub="eviction", obj=eviction)


def in_scope(policy: dict, req: dict) -> bool:
    resource = req["resource"]["resource"] + (f"/{req['subResource']}" if req["subResource"] else "")
    return any(req["resource"]["group"] in r["apiGroups"] and req["resource"]["version"] in r["apiVersions"]
               and req["operation"] in r["operations"] and resource in r["resources"]
               for r in policy["spec"]["matchConstraints"]["resourceRules"])


def admit(req: dict) -> tuple[bool, str]:
    """(allowed, the denial message) of the policy for ``req`` (module doc)."""
    policy = manifest("ValidatingAdmissionPolicy")
    if not in_scope(policy, req):
        return True, "out of scope"
    env = celpy.Environment()

    def run(expression: str, activation: dict):
        return env.program(env.compile(expression)).evaluate(activation)

    activation = {"request": celpy.json_to_cel(req), "object": celpy.json_to_cel(req["object"]),
                  "oldObject": celpy.json_to_cel(req["oldObject"])}
    if not all(run(c["expression"], activation) for c in policy["spec"].get("matchConditions", [])):
        return True, "not the agent"
    variables = {}
    for v in policy["spec"].get("variables", []):
        variables[v["name"]] = run(v["expression"], activation | {"variables": celpy.json_to_cel(variables)})
    activation["variables"] = celpy.json_to_cel(variables)
    for rule in policy["spec"]["validations"]:
        try:
            ok = run(rule["expression"], activation)
        except celpy.CELEvalError as exc:  # failurePolicy: Fail
            return False, f"evaluation error: {exc}"
        if not ok:
            message = run(rule["messageExpression"], activation) if "messageExpression" in rule else rule["message"]
            return False, str(message)
    return True, ""


@pytest.fixture(scope="module")
def pods():
    """Pods as the test API server stores them (uid, resourceVersion, creationTimestamp,
    ownerReferences of their controller): one on each of two nodes, one not scheduled yet."""
    with TestAPIServer() as api:
        for name in ("n1", "n2"):
            api.create("nodes", node(name))
        api.create("pods", pod("batch", "mine-0", "n1", tier="batch", owner_kind="Job", owner_name="train"))
        api.create("pods", pod("shop", "web-7d9f8b6c5d-x2x9q", "n2", owner_kind="ReplicaSet",
                               owner_name="web-7d9f8b6c5d", labels={"pod-template-hash": "7d9f8b6c5d"}))
        api.create("pods", pod("batch", "pending-0", tier="batch", owner_kind="Job", owner_name="train"))
        yield {p["metadata"]["name"]: p for p in api.objects("pods")}


ALLOWED = {
    "delete of a pod on its own node": (delete, "mine-0", user(node_names=["n1"])),
    "DisruptionTarget patch of a pod on its own node": (mark, "mine-0", user(node_names=["n1"])),
    "another user (the scheduler) deleting any pod": (delete, "web-7d9f8b6c5d-x2x9q",
                                                     user("system:serviceaccount:kalena:kalena-scheduler")),
    "another user evicting": (evict, "web-7d9f8b6c5d-x2x9q", user("system:serviceaccount:kalena:kalena-scheduler")),
}
REFUSED = {
    "delete of another node's production pod": (delete, "web-7d9f8b6c5d-x2x9q", user(node_names=["n1"]),
                                                "kalena-agent of node n1 may not change pod web-7d9f8b6c5d-x2x9q, "
                                                "bound to n2"),
    "status patch of another node's pod": (mark, "web-7d9f8b6c5d-x2x9q", user(node_names=["n1"]), "bound to n2"),
    "delete of a pod on no node yet": (delete, "pending-0", user(node_names=["n1"]), "bound to no node"),
    "delete without the node-name claim (token not bound to a pod, cluster < 1.30)":
        (delete, "mine-0", user(node_names=None), "kalena-agent without a node-name claim may not change pod mine-0"),
    "delete with two node-name values": (delete, "mine-0", user(node_names=["n1", "n2"]), "without a node-name"),
    "eviction of a pod on its own node (the admission request cannot show the node)":
        (evict, "mine-0", user(node_names=["n1"]), "may not use the Eviction API"),
    "eviction of another node's pod": (evict, "web-7d9f8b6c5d-x2x9q", user(node_names=["n1"]),
                                       "may not use the Eviction API"),
}


@pytest.mark.parametrize("build, name, userinfo", ALLOWED.values(), ids=ALLOWED.keys())
def test_the_policy_allows(pods, build, name, userinfo):
    allowed, message = admit(build(pods[name], userinfo))
    assert allowed, message


@pytest.mark.parametrize("build, name, userinfo, says", REFUSED.values(), ids=REFUSED.keys())
def test_the_policy_refuses(pods, build, name, userinfo, says):
    allowed, message = admit(build(pods[name], userinfo))
    assert not allowed and says in message, message


def test_every_pod_write_the_agent_may_make_is_in_the_policys_scope():
    """Each write RBAC grants the agent (anything but get/list/watch) on pods or a pod subresource is
    an operation the policy sees; the binding denies. Without the policy the node check is the
    agent's own."""
    writes = {(resource, verb) for group, resource, verb in granted(manifest("ClusterRole"))
              if resource.split("/")[0] == "pods" and verb not in ("get", "list", "watch")}
    assert writes == {("pods", "delete"), ("pods/status", "patch")}
    operation = {"delete": "DELETE", "patch": "UPDATE", "update": "UPDATE", "create": "CREATE"}
    policy = manifest("ValidatingAdmissionPolicy")
    for resource, verb in writes:
        name, _, sub = resource.partition("/")
        req = {"resource": {"group": "", "version": "v1", "resource": name}, "subResource": sub,
               "operation": operation[verb]}
        assert in_scope(policy, req), (resource, verb)
    binding = manifest("ValidatingAdmissionPolicyBinding")
    assert binding["spec"]["policyName"] == policy["metadata"]["name"]
    assert binding["spec"]["validationActions"] == ["Deny"] and policy["spec"]["failurePolicy"] == "Fail"
    assert "paramRef" not in binding["spec"] and "matchResources" not in binding["spec"]  # every namespace
