"""The admission webhook as kube-apiserver calls it: AdmissionReview v1 over mutual TLS to `kalena
serve --tls-port` (a real TLS handshake against CAs the test makes, the client certificate
kube-apiserver presents), good and malformed reviews each answered within the API server's budget
of 1 s."""

from __future__ import annotations

import base64
import json

import httpx
import pytest

from tests.agents.orchestrators.kubernetes.test_admission import admission_review, pod


@pytest.fixture(scope="module")
def webhook(kalena_webhook):
    with httpx.Client(base_url=kalena_webhook.url, verify=kalena_webhook.client()) as client:
        yield client


def _post(client, body: bytes) -> dict:
    # timeout=1.0: the webhook must answer inside kube-apiserver's budget (half of timeoutSeconds: 2 in
    # deploy/kubernetes/webhook.yaml), or the request fails — asserted by httpx raising
    response = client.post("/kubernetes/admission/mutate", content=body,
                           headers={"Content-Type": "application/json"}, timeout=1.0)
    assert response.status_code == 200
    return response.json()


def test_batch_pod_mutated_over_tls(webhook):
    answer = _post(webhook, json.dumps(admission_review(pod())).encode())
    assert answer["response"]["allowed"] is True
    patch = json.loads(base64.b64decode(answer["response"]["patch"]))
    assert {"op": "add", "path": "/spec/schedulerName", "value": "kalena"} in patch


def test_job_pod_inferred_as_batch_from_settings(webhook):
    owners = [{"apiVersion": "batch/v1", "kind": "Job", "name": "t", "uid": "u", "controller": True}]
    answer = _post(webhook, json.dumps(admission_review(pod(labels={}, owners=owners))).encode())
    patch = json.loads(base64.b64decode(answer["response"]["patch"]))
    assert {"op": "add", "path": "/metadata/labels", "value": {"kalena.naughtian.io/tier": "batch"}} in patch


@pytest.mark.parametrize("body, field", [
    (b"", "body"), (b"\xff\xfe", "body"), (b"null", "body"), (b"[" * 200_000, "body"),
    (json.dumps(admission_review(pod(resources={"requests": {"cpu": "x" * 3_000_000}}))).encode(),
     "request.object.spec.containers[0].resources.requests.cpu"),
    (json.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {"uid": "u"}}).encode(),
     "request.operation"),
    (b" " * (7 * 2**20), "body"),  # over the body cap: refused without parsing
], ids=["empty", "not-utf8", "null", "deep", "3MB-quantity", "no-operation", "huge"])
def test_malformed_review_denied_within_budget(webhook, body, field):
    answer = _post(webhook, body)
    assert answer["response"]["allowed"] is False
    message = answer["response"]["status"]["message"]
    assert message.startswith(f"kalena admission: {field}:") and len(message) < 500


def test_wrong_method_is_a_denial_not_a_crash(webhook):
    response = webhook.get("/kubernetes/admission/mutate", timeout=1.0)
    assert response.status_code == 405 and response.json()["response"]["allowed"] is False
