"""The mutating webhook's pure decisions on real AdmissionReview v1 JSON (case C10 and bad input)."""

from __future__ import annotations

import base64
import copy
import json

import jsonpatch
import pytest

from agents.orchestrators.kubernetes.admission import AdmissionConfig, review
from agents.orchestrators.kubernetes.batch_resources import BATCH_CPU, BATCH_MEMORY, RESOURCES_ANNOTATION, read_annotation

GIB = 2**30


def pod(labels=None, resources=None, owners=None, init=None, annotations=None):
    meta = {"name": "train-0", "namespace": "batch", "labels": labels if labels is not None else {"kalena.naughtian.io/tier": "batch"}}
    if owners:
        meta["ownerReferences"] = owners
    if annotations:
        meta["annotations"] = annotations
    spec = {"containers": [{"name": "main", "image": "busybox",
                            "resources": resources if resources is not None else
                            {"requests": {"cpu": "4", "memory": "8Gi"}, "limits": {"cpu": "4", "memory": "8Gi"}}}],
            "restartPolicy": "Never"}
    if init:
        spec["initContainers"] = init
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}


def admission_review(obj, *, kind=None, operation="CREATE", uid="705ab4f5-6393-11e8-b7cc-42010a800002"):
    kind = kind or {"group": "", "version": "v1", "kind": "Pod"}
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
            "request": {"uid": uid, "kind": kind, "resource": {"group": kind["group"], "version": kind["version"],
                                                                  "resource": kind["kind"].lower() + "s"},
                        "namespace": "batch", "operation": operation, "object": obj,
                        "userInfo": {"username": "system:serviceaccount:kube-system:job-controller"}}}


def mutated(obj, config=AdmissionConfig(), kind=None):
    answer = review(json.dumps(admission_review(obj, kind=kind)).encode(), config)
    response = answer["response"]
    assert answer["apiVersion"] == "admission.k8s.io/v1" and answer["kind"] == "AdmissionReview"
    assert response["uid"] == "705ab4f5-6393-11e8-b7cc-42010a800002"
    assert response["allowed"] is True, response
    if "patch" not in response:
        return obj, response
    assert response["patchType"] == "JSONPatch"
    patch = json.loads(base64.b64decode(response["patch"]))
    return jsonpatch.apply_patch(copy.deepcopy(obj), patch), response


def test_c10_batch_pod_moves_into_extended_resources():
    out, _ = mutated(pod())
    resources = out["spec"]["containers"][0]["resources"]
    # no cpu/memory left: BestEffort to the kubelet; request = limit on the extended resources
    assert resources == {"requests": {BATCH_CPU: "4000", BATCH_MEMORY: str(8 * GIB)},
                         "limits": {BATCH_CPU: "4000", BATCH_MEMORY: str(8 * GIB)}}
    assert out["spec"]["schedulerName"] == "kalena"
    original = json.loads(out["metadata"]["annotations"][RESOURCES_ANNOTATION])
    assert original["containers"]["main"] == {"requests": {"cpu": "4", "memory": "8Gi"},
                                              "limits": {"cpu": "4", "memory": "8Gi"}}
    assert read_annotation(out["metadata"]["annotations"]).to_json() == {
        "request_mcpu": 4000, "request_bytes": 8 * GIB, "limit_mcpu": 4000, "limit_bytes": 8 * GIB}


def test_reinvocation_changes_nothing():
    once, _ = mutated(pod())
    twice, response = mutated(once)
    assert "patch" not in response and twice == once


def test_extender_mode_keeps_scheduler_name():
    out, _ = mutated(pod(), AdmissionConfig(extender_mode=True))
    assert "schedulerName" not in out["spec"]
    assert BATCH_CPU in out["spec"]["containers"][0]["resources"]["requests"]


@pytest.mark.parametrize("infer, batch", [(True, True), (False, False)], ids=["inference-on", "inference-off"])
def test_job_owned_pod_is_batch_only_with_inference(infer, batch):
    owners = [{"apiVersion": "batch/v1", "kind": "Job", "name": "train", "uid": "u1", "controller": True}]
    out, response = mutated(pod(labels={"job-name": "train"}, owners=owners), AdmissionConfig(infer_jobs=infer))
    assert ("patch" in response) is batch
    if batch:
        assert out["metadata"]["labels"]["kalena.naughtian.io/tier"] == "batch"
        assert out["spec"]["schedulerName"] == "kalena"


def test_service_pod_untouched():
    _, response = mutated(pod(labels={"kalena.naughtian.io/tier": "service"}))
    assert "patch" not in response


@pytest.mark.parametrize(
    "resources, init, expected",
    [
        # only a limit: Kubernetes defaulting makes request = limit → 500 mcpu, 1 GiB; limit defined
        pytest.param({"limits": {"cpu": "500m", "memory": "1Gi"}}, None,
                     {"request_mcpu": 500, "request_bytes": GIB, "limit_mcpu": 500, "limit_bytes": GIB}, id="limit-only"),
        # request without limit: the pod's limit is undefined (null)
        pytest.param({"requests": {"cpu": "2", "memory": "1.5Gi"}}, None,
                     {"request_mcpu": 2000, "request_bytes": 1610612736, "limit_mcpu": None, "limit_bytes": None},
                     id="no-limit"),
        # init container 3 cores > main 1 core: effective request max(1000, 3000) = 3000
        pytest.param({"requests": {"cpu": "1", "memory": "1Gi"}, "limits": {"cpu": "1", "memory": "1Gi"}},
                     [{"name": "fetch", "resources": {"requests": {"cpu": "3", "memory": "512Mi"},
                                                      "limits": {"cpu": "3", "memory": "512Mi"}}}],
                     {"request_mcpu": 3000, "request_bytes": GIB, "limit_mcpu": 3000, "limit_bytes": GIB}, id="init"),
        # Kubernetes quantity rules: 0.1m rounds up to 1 mcpu, 1e3 bytes, 1.5G decimal
        pytest.param({"requests": {"cpu": "0.1m", "memory": "1e3"}}, None,
                     {"request_mcpu": 1, "request_bytes": 1000, "limit_mcpu": None, "limit_bytes": None}, id="rounding"),
        # resources given as JSON null: nothing requested, the limit undefined
        pytest.param({"requests": None, "limits": None}, None,
                     {"request_mcpu": 0, "request_bytes": 0, "limit_mcpu": None, "limit_bytes": None}, id="nulls"),
    ],
)
def test_pod_values(resources, init, expected):
    out, _ = mutated(pod(resources=resources, init=init))
    assert read_annotation(out["metadata"]["annotations"]).to_json() == expected
    for group in ("containers", "initContainers"):
        for c in out["spec"].get(group, []):
            r = c.get("resources", {})
            assert not ({"cpu", "memory"} & set(r.get("requests", {})) | {"cpu", "memory"} & set(r.get("limits", {})))
            assert r.get("requests") == r.get("limits")


def job(restart="Never", policy=None, labels=None):
    spec = {"template": {"spec": {"restartPolicy": restart, "containers": [{"name": "main", "image": "busybox"}]}}}
    if policy is not None:
        spec["podFailurePolicy"] = policy
    return {"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": "train", "labels": labels or {"kalena.naughtian.io/tier": "batch"}}, "spec": spec}


JOB_KIND = {"group": "batch", "version": "v1", "kind": "Job"}
IGNORE = {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]}


def test_job_gets_pod_failure_policy_first():
    out, _ = mutated(job(), kind=JOB_KIND)
    assert out["spec"]["podFailurePolicy"] == {"rules": [IGNORE]}
    fail = {"action": "FailJob", "onExitCodes": {"operator": "In", "values": [42]}}
    out, _ = mutated(job(policy={"rules": [fail]}), kind=JOB_KIND)
    assert out["spec"]["podFailurePolicy"]["rules"] == [IGNORE, fail]
    again, response = mutated(out, kind=JOB_KIND)
    assert "patch" not in response and again == out


def test_job_with_on_failure_gets_a_warning_not_a_policy():
    out, response = mutated(job(restart="OnFailure"), kind=JOB_KIND)
    assert "podFailurePolicy" not in out["spec"]
    assert "restartPolicy" in response["warnings"][0]


def _broken(path, value):
    doc = admission_review(pod())
    target = doc
    *parents, last = path
    for key in parents:
        target = target[key]
    if value is KeyError:
        del target[last]
    else:
        target[last] = value
    return json.dumps(doc).encode()


@pytest.mark.parametrize(
    "body, field",
    [
        pytest.param(b"{not json", "body", id="not-json"),
        pytest.param(b"[]", "body", id="not-an-object"),
        pytest.param(json.dumps({"apiVersion": "admission.k8s.io/v1beta1", "kind": "AdmissionReview"}).encode(),
                     "apiVersion", id="v1beta1"),
        pytest.param(_broken(["request"], KeyError), "request", id="no-request"),
        pytest.param(_broken(["request", "uid"], 7), "request.uid", id="uid-not-string"),
        pytest.param(_broken(["request", "operation"], KeyError), "request.operation", id="no-operation"),
        pytest.param(_broken(["request", "object"], "pod"), "request.object", id="object-not-object"),
        pytest.param(_broken(["request", "object", "spec", "containers"], []), "request.object.spec.containers",
                     id="no-containers"),
        pytest.param(_broken(["request", "object", "spec", "containers", 0, "resources", "requests", "cpu"], "4x"),
                     "request.object.spec.containers[0].resources.requests.cpu", id="bad-cpu"),
        pytest.param(_broken(["request", "object", "spec", "containers", 0, "resources", "limits", "memory"], "-1Gi"),
                     "request.object.spec.containers[0].resources.limits.memory", id="negative-memory"),
        pytest.param(_broken(["request", "object", "spec", "containers", 0, "resources", "requests", "cpu"], "8"),
                     "request.object.spec.containers[0].resources.requests.cpu", id="request-over-limit"),
        pytest.param(_broken(["request", "object", "spec", "containers", 0], "main"),
                     "request.object.spec.containers[0]", id="container-not-object"),
        pytest.param(_broken(["request", "object", "metadata", "labels"], {"a": 1}),
                     "request.object.metadata.labels[a]", id="label-not-string"),
    ],
)
def test_malformed_review_is_denied_naming_the_field(body, field):
    response = review(body)["response"]
    assert response["allowed"] is False and "patch" not in response
    assert response["status"]["code"] == 400
    assert f"{field}:" in response["status"]["message"], response["status"]["message"]


def test_an_internal_error_leaves_the_pod_unchanged(monkeypatch):
    import agents.orchestrators.kubernetes.admission as admission

    def broken(request, config):
        raise KeyError("bug")
    monkeypatch.setattr(admission, "decide", broken)
    response = review(json.dumps(admission_review(pod())).encode())["response"]
    assert response["allowed"] is True and "patch" not in response and "internal error" in response["warnings"][0]


# LimitRange and ResourceQuota (docs/kubernetes-admission.md, "Namespaces with a LimitRange or a
# ResourceQuota"): kube-apiserver runs LimitRanger's defaulting before the mutating webhooks and the
# ResourceQuota check after them, so the webhook sees the LimitRange's defaults and the quota sees
# the webhook's answer.

def test_a_limitrange_default_is_what_the_webhook_moves_into_the_extended_resources():
    # the pod as LimitRanger leaves it: defaultRequest cpu 100m / memory 128Mi, default cpu 500m / memory 256Mi
    defaulted = {"requests": {"cpu": "100m", "memory": "128Mi"}, "limits": {"cpu": "500m", "memory": "256Mi"}}
    out, _ = mutated(pod(resources=defaulted))
    resources = out["spec"]["containers"][0]["resources"]
    assert resources["requests"] == {BATCH_CPU: "100", BATCH_MEMORY: str(128 * 2**20)}
    assert json.loads(out["metadata"]["annotations"][RESOURCES_ANNOTATION])["containers"]["main"] == defaulted


def test_after_the_webhook_a_batch_pod_requests_nothing_a_cpu_or_memory_quota_counts():
    out, _ = mutated(pod())
    requested = set()
    for c in out["spec"]["containers"]:
        for kind in ("requests", "limits"):
            requested |= {f"{kind}.{name}" for name in (c.get("resources") or {}).get(kind, {})}
    # a quota on requests.cpu / limits.memory … refuses such a pod ("must specify …"); a quota on the
    # extended resources counts it — the only requests it has are those
    assert requested == {f"requests.{BATCH_CPU}", f"requests.{BATCH_MEMORY}", f"limits.{BATCH_CPU}",
                         f"limits.{BATCH_MEMORY}"}
