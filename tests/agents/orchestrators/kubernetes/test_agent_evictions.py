"""The agent's Kubernetes evictions through the official client on the test API server: only pods
bound to its own node (the enforcer checks first; the API server's admission policy enforces it,
tests/deploy/test_agent_admission_policy.py), a node-pressure eviction — DisruptionTarget, then
delete with the grace, never the Eviction API —, refusals reported, the token file re-read when it
rotates, TLS verification of the API server never off."""

from __future__ import annotations

import numpy as np
import pytest

from agents.cgroups.backend import CgroupV2
from agents.enforcer import Enforcer, kube_api_client
from agents.model import KIND_KUBERNETES, Workload
from agents.orchestrators.kubernetes.testserver import TestAPIServer, node, pod
from tests.agents.conftest import make_v2_tree


def workload(ref: str) -> Workload:
    return Workload(id=ref, name=ref, kind=KIND_KUBERNETES, tier="batch", priority=0, request=np.zeros(8),
                    limit=np.full(8, np.inf), start_s=0.0, grace_s=30.0, cgroup="kubepods/x", runtime_ref=ref)


@pytest.fixture
def api():
    with TestAPIServer() as server:
        server.create("nodes", node("n1"))
        server.create("nodes", node("n2"))
        server.create("pods", pod("batch", "mine-0", "n1", tier="batch"))
        server.create("pods", pod("batch", "theirs-0", "n2", tier="batch"))
        yield server


def enforcer(api, tmp_path, token_file) -> Enforcer:
    client = kube_api_client(in_cluster=False, url=api.url, token_file=str(token_file), ca_file=None)
    return Enforcer(CgroupV2(make_v2_tree(tmp_path / "cg", {})), kube_api=client, node_name="n1")


def test_evicts_only_pods_on_its_own_node(api, tmp_path):
    token = tmp_path / "token"
    token.write_text("tok-1\n")
    e = enforcer(api, tmp_path, token)
    refused = e.terminate(workload("batch/theirs-0"), 30)
    assert not refused.ok and "bound to 'n2', not to this agent's node 'n1'" in refused.error
    assert not [(v, p) for v, p, _ in api.requests if "theirs-0" in p and v != "GET"]  # nothing written
    assert e.terminate(workload("batch/mine-0"), 30).ok
    assert [p for p in api.objects("pods") if p["metadata"]["name"] == "mine-0"] == []
    assert e.kill(workload("batch/gone-0")).ok  # 404: already gone, nothing left to stop


def test_an_eviction_marks_the_pod_disrupted_and_deletes_it_with_its_grace(tmp_path):
    """What a Job's podFailurePolicy ``Ignore`` on DisruptionTarget needs, without the Eviction API
    (whose admission request cannot show the pod's node): the condition first, then DELETE with
    the grace; a PodDisruptionBudget is not consulted, as for the kubelet's node-pressure evictions."""
    with TestAPIServer(graceful=True, grace_scale=1000.0) as api:
        api.create("nodes", node("n1"))
        api.create("pods", pod("batch", "mine-0", "n1", tier="batch", owner_kind="Job", owner_name="train"))
        api.add_pdb("batch", "keep", {"app": "mine"}, min_available=1)
        token = tmp_path / "token"
        token.write_text("tok-1")
        applied = enforcer(api, tmp_path, token).terminate(workload("batch/mine-0"), 20)
        assert applied.ok, applied.error
        (stored,) = api.objects("pods")
        conditions = {c["type"]: c for c in stored["status"].get("conditions") or []}
        assert conditions["DisruptionTarget"]["status"] == "True"
        assert conditions["DisruptionTarget"]["reason"] == "TerminationByKalenaAgent"
        assert stored["metadata"]["deletionGracePeriodSeconds"] == 20 and stored["metadata"]["deletionTimestamp"]
        calls = [(v, p) for v, p, _ in api.requests if v != "GET"]
        assert calls == [("PATCH", "/api/v1/namespaces/batch/pods/mine-0/status"),
                         ("DELETE", "/api/v1/namespaces/batch/pods/mine-0")]


def test_a_refused_write_is_reported_not_raised(api, tmp_path):
    token = tmp_path / "token"
    token.write_text("tok-1")
    api.fault("PATCH", r"/pods/mine-0/status$", code=403, reason="Forbidden",
              message="pods \"mine-0\" is forbidden: ValidatingAdmissionPolicy 'kalena-agent-own-node' with binding "
                      "'kalena-agent-own-node' denied request: kalena-agent of node n1 may not change pod mine-0")
    applied = enforcer(api, tmp_path, token).terminate(workload("batch/mine-0"), 30)
    assert not applied.ok and "HTTP 403" in applied.error and "kalena-agent-own-node" in applied.error
    assert [p["metadata"]["name"] for p in api.objects("pods") if p["metadata"]["name"] == "mine-0"] == ["mine-0"]


def test_rotated_token_is_read_again(api, tmp_path):
    token = tmp_path / "token"
    token.write_text("tok-1")
    client = kube_api_client(in_cluster=False, url=api.url, token_file=str(token), ca_file=None)
    assert client.configuration.api_key["authorization"] == "tok-1"
    token.write_text("tok-2")
    client.configuration.refresh_api_key_hook(client.configuration)
    assert client.configuration.get_api_key_with_prefix("authorization") == "Bearer tok-2"
    assert client.configuration.verify_ssl is True  # the API server is always verified
