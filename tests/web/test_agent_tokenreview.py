"""One credential per node on Kubernetes: the agent's projected service-account token checked
with TokenReview on the test API server through the real client; refused for another user, a
token bound to no node, a node outside the cluster, a wrong audience, a revoked credential."""

from __future__ import annotations

import pytest
from kubernetes import client as k8s

from agents.orchestrators.kubernetes import KubernetesOrchestrator
from agents.orchestrators.kubernetes.testkubelet import token_reviews
from agents.orchestrators.kubernetes.testserver import TestAPIServer
from kalena_web.kubehooks.agent_auth import service_account_authenticate
from kalena_web.telemetry.models import AgentToken
from kalena_web.telemetry.selectors import Refused, token_authenticate
from tests.web.live_cluster import NODES

AGENT = "system:serviceaccount:kalena-system:kalena-agent"


@pytest.fixture
def api(settings):
    settings.KALENA_AGENT_TOKENREVIEW_CLUSTER = "home"
    with TestAPIServer() as server:
        token_reviews(server, {
            "sa-alpha": {"username": AGENT, "node": NODES[0], "audiences": ["kalena"]},
            "sa-other-user": {"username": "system:serviceaccount:default:default", "node": NODES[0],
                              "audiences": ["kalena"]},
            "sa-unbound": {"username": AGENT, "audiences": ["kalena"]},
            "sa-stranger": {"username": AGENT, "node": "elsewhere", "audiences": ["kalena"]},
            "sa-wrong-aud": {"username": AGENT, "node": NODES[0], "audiences": ["https://kubernetes.default.svc"]},
        })
        yield server


def review(api):
    kube = KubernetesOrchestrator(k8s.ApiClient(k8s.Configuration(host=api.url)))
    return lambda token, audiences, cluster: kube.token_review(token, audiences)


def test_projected_token_authenticates_its_node(live, api):
    identity = service_account_authenticate("sa-alpha", review=review(api))
    assert (identity.node_name, identity.cluster_id) == (NODES[0], live.id)
    again = service_account_authenticate("sa-alpha", review=review(api))
    assert again.token_id == identity.token_id  # one credential row per node
    bodies = [b for v, p, b in api.requests if p.endswith("/tokenreviews")]
    assert bodies[0]["spec"] == {"token": "sa-alpha", "audiences": ["kalena"]}


@pytest.mark.parametrize("token, words", [
    ("sa-other-user", "is not the agent service account"),
    ("sa-unbound", "bound to no node"),
    ("sa-stranger", "is not in cluster 'home'"),
    ("sa-wrong-aud", "not for audience 'kalena'"),
    ("forged", "not authenticated"),
])
def test_refused_tokens(live, api, token, words):
    with pytest.raises(Refused) as info:
        service_account_authenticate(token, review=review(api))
    assert info.value.reason == "unknown_token" and words in info.value.detail


def test_revoked_credential_is_refused(live, api):
    from django.utils import timezone

    identity = service_account_authenticate("sa-alpha", review=review(api))
    AgentToken.objects.filter(id=identity.token_id).update(revoked_at=timezone.now())
    with pytest.raises(Refused) as info:
        service_account_authenticate("sa-alpha", review=review(api))
    assert info.value.reason == "revoked_token"


def test_kalena_tokens_still_work_and_unreachable_api_refuses(live, settings):
    settings.KALENA_AGENT_TOKENREVIEW_CLUSTER = "home"
    with pytest.raises(Refused) as info:
        token_authenticate("kna_" + "x" * 40)  # a Kalena token: looked up as before
    assert info.value.reason == "unknown_token" and "no agent token" in info.value.detail
    with pytest.raises(Refused) as info:  # the fake orchestrator has no TokenReview
        token_authenticate("eyJhbGciOi.projected.token")
    assert info.value.reason == "unknown_token"


def test_a_tokenreview_that_fails_is_a_transient_refusal_not_a_refused_token(live, api):
    """The API server not answering is no verdict on the token: the console closes the connection
    4500 (the agent is back within seconds) instead of denying it (the agent backs off minutes)."""
    def unreachable(token, audiences, cluster):
        raise ConnectionError("the API server did not answer")

    with pytest.raises(Refused) as info:
        service_account_authenticate("sa-alpha", review=unreachable)
    assert info.value.transient and "TokenReview failed: ConnectionError" in info.value.detail
    with pytest.raises(Refused) as forged:                 # a verdict: refused for good
        service_account_authenticate("forged", review=review(api))
    assert not forged.value.transient
