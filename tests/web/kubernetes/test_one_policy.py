"""One policy everywhere (docs/design.md §15): a version saved in the console is what the Kubernetes
Lease holder's scheduler, the scheduler extender and the batch-capacity publisher decide with on
their next pass, and the policy page shows which version each part applies. Driven through the
test API server with the real ``kubernetes`` client and pods shaped as the Job controller makes
them (ownerReferences, ``job-name`` / ``controller-uid`` labels, random suffixes)."""

from __future__ import annotations

import json

import numpy as np
import pytest
import yaml
from django.contrib.auth.models import Group
from kubernetes import client as k8s

from agents.orchestrators.kubernetes import KubernetesOrchestrator
from agents.orchestrators.kubernetes.lease import LeaderElector
from agents.orchestrators.kubernetes.testserver import TestAPIServer, node, pod
from agents.orchestrators.kubernetes.watch import KubernetesWatcher
from kalena_web.archive.models import EvictionRecord
from kalena_web.control.leading import ClusterScheduler
from kalena_web.control.reconciler import Reconciler
from kalena_web.kubehooks.models import PublishedBatch
from kalena_web.ledger.models import LiveNodeLedger
from kalena_web.policy.models import PolicyApplied, PolicyVersion
from kalena_web.scheduling.models import BatchPod
from tests.web.conftest import PASSWORD
from tests.web.live_cluster import NODES

pytestmark = pytest.mark.django_db
DEFAULT_COOLDOWN_S = 600.0  # EvictionPolicy().cooldown_s
SAVED_COOLDOWN_S = 3600.0


@pytest.fixture
def api():
    with TestAPIServer() as server:
        for name in NODES:
            server.create("nodes", node(name, cpu="16", memory="64Gi"))
        yield server


@pytest.fixture
def tuner(client, django_user_model):
    user = django_user_model.objects.create_user(username="olga", password=PASSWORD)
    user.groups.add(Group.objects.get(name="operator"))
    client.force_login(user)
    return client


def save_in_console(client, cluster: str, **changes: str) -> int:
    """Post the policy page's form as the browser does, with ``changes`` (dotted keys, or
    ``namespaces``), and Save; returns the version saved."""
    page = client.get(f"/policy/{cluster}/")
    fields = {f.name: f.value for section in page.context["sections"].values() for f in section}
    fields.update(namespaces=page.context["namespaces"], carried=page.context["carried"])
    fields.update({k.replace("__", "."): v for k, v in changes.items()})
    saved = client.post(f"/policy/{cluster}/", {**fields, "action": "save"})
    assert saved.status_code == 302, saved.content.decode()[:2000]
    return int(saved["Location"].rsplit("=", 1)[1])


def job_pod(namespace: str, job: str, suffix: str, *, cpu: str = "1", host: str = "") -> dict:
    """A pod as the Job controller creates it: ``<job>-<random>``, owned by the Job, with its
    ``job-name`` and ``controller-uid`` labels; ``host`` pins it with a nodeSelector."""
    labels = {"batch.kubernetes.io/job-name": job, "job-name": job, "batch.kubernetes.io/controller-uid": f"uid-{job}",
              "controller-uid": f"uid-{job}"}
    obj = pod(namespace, f"{job}-{suffix}", tier="batch", owner_kind="Job", owner_name=job, cpu=cpu, memory="1Gi",
              limit_cpu=cpu, limit_memory="2Gi", labels=labels)
    if host:
        obj["spec"]["nodeSelector"] = {"kubernetes.io/hostname": host}
    return obj


def lease_holder(cluster, api: TestAPIServer) -> ClusterScheduler:
    """The scheduler ``kalena watch`` starts (no policy given), holding the Lease."""
    orch = KubernetesOrchestrator(k8s.ApiClient(k8s.Configuration(host=api.url)), request_timeout_s=5.0,
                                  identity="kalena-a")
    elector = LeaderElector(orch, identity="kalena-a", lease_duration_s=30.0, renew_deadline_s=20.0,
                            retry_period_s=0.2)
    s = ClusterScheduler(cluster=cluster, orchestrator=orch, elector=elector, rng=np.random.default_rng(0))
    assert s.elector.try_acquire_or_renew()
    return s


def watch(rec: Reconciler, core: KubernetesOrchestrator, api: TestAPIServer, key: str, verb: str = "MODIFIED") -> None:
    """What the pods watch delivers for ``key`` now, applied by the reconciler."""
    rec.apply_all(KubernetesWatcher(core)._translate("pods", verb, api.get("pods", key)))


def why_pending(name: str) -> dict:
    p = BatchPod.objects.select_related("why_pending").get(workload__name=name)
    assert p.state == BatchPod.PENDING, (name, p.state)
    return p.why_pending.record


def test_a_cap_and_a_cooldown_saved_in_the_console_are_applied_by_the_next_kubernetes_pass(live, api, tuner):
    clock = [1000.0]
    s = lease_holder(live, api)
    core = s.orchestrator
    rec = Reconciler(cluster=live, clock=lambda: clock[0])
    # before any change: the Job etl's first pod is placed with the defaults (version 0)
    api.create_pod(job_pod("batch", "etl", "x7k2p"))
    watch(rec, core, api, "batch/etl-x7k2p", "ADDED")
    assert s.run_pass(now_s=1000.0).placed == 1
    victim = api.get("pods", "batch/etl-x7k2p")["spec"]["nodeName"]
    api.set_pod_phase("batch/etl-x7k2p", "Running")
    watch(rec, core, api, "batch/etl-x7k2p")
    assert PolicyApplied.objects.get(cluster=live, part="scheduler").version == 0

    # the operator caps team-a at 1 running batch pod and lengthens the cooldown to an hour
    version = save_in_console(tuner, "home", namespaces="team-a: 1", eviction__cooldown_s=f"{SAVED_COOLDOWN_S:g}")
    assert version == 1

    # the kubelet evicts etl's pod at t = 1100; the Job makes a replacement that only fits there
    clock[0] = 1100.0
    api.set_pod_phase("batch/etl-x7k2p", "Failed", reason="Evicted", message="The node was low on memory.")
    watch(rec, core, api, "batch/etl-x7k2p")
    evicted = EvictionRecord.objects.get(workload_name="batch/etl-x7k2p")
    assert evicted.node.name == victim
    api.create_pod(job_pod("batch", "etl", "q9v4m", host=victim))
    watch(rec, core, api, "batch/etl-q9v4m", "ADDED")
    sweep = [f"sweep-{suffix}" for suffix in ("a1b2c", "d3e4f", "g5h6j")]
    for name in sweep:
        api.create_pod(job_pod("team-a", "sweep", name.split("-")[1]))
        watch(rec, core, api, f"team-a/{name}", "ADDED")

    # 30 min after the eviction: past the default 600 s cooldown, within the saved 3600 s
    now = evicted.time_s + 1800.0
    assert DEFAULT_COOLDOWN_S < now - evicted.time_s < SAVED_COOLDOWN_S
    report = s.run_pass(now_s=now)
    assert report.placed == 1  # one pod of team-a; etl's replacement waits for the cooldown
    assert PolicyApplied.objects.get(cluster=live, part="scheduler").version == 1

    bound = [n for n in sweep if api.get("pods", f"team-a/{n}")["spec"].get("nodeName")]
    assert len(bound) == 1
    for name in set(sweep) - set(bound):
        record = why_pending(f"team-a/{name}")
        assert record["binding"] == "namespace_cap" and record["excluded"] == {"namespace_cap": 3}
        cap = next(r for r in record["rejections"] if r["kind"] == "namespace_cap")
        assert (cap["namespace"], cap["running"], cap["cap"]) == ("team-a", 1, 1)

    assert not api.get("pods", "batch/etl-q9v4m")["spec"].get("nodeName")
    record = why_pending("batch/etl-q9v4m")
    assert record["excluded"]["cooldown"] == 1  # the victim node; the other two fail the nodeSelector
    cooldown = next(r for r in record["rejections"] if r["kind"] == "cooldown")
    assert cooldown["node"] == victim and cooldown["owner"].endswith("Job/etl")
    assert cooldown["until_s"] == pytest.approx(evicted.time_s + SAVED_COOLDOWN_S)

    # kubectl describe shows why: FailedScheduling names the cap
    core.flush_events()
    failed = [e["message"] for e in api.objects("events")
              if e["reason"] == "FailedScheduling" and e["involvedObject"]["namespace"] == "team-a"]
    assert failed and all("namespace cap" in m for m in failed), failed


def test_a_version_saved_between_passes_is_read_once_and_reused_while_current(live, api, tuner):
    s = lease_holder(live, api)
    s.run_pass(now_s=1000.0)
    first = s.current
    assert first.version == 0
    s.run_pass(now_s=1001.0)
    assert s.current is first  # unchanged version: the policy object is reused, not re-parsed
    save_in_console(tuner, "home", placement__weight_image="0")
    s.run_pass(now_s=1002.0)
    assert s.current.version == 1 and s.current.policy.placement.weight_image == 0.0


def test_a_version_that_fails_validation_is_refused_and_the_scheduler_keeps_the_current_one(live, api, tuner):
    s = lease_holder(live, api)
    save_in_console(tuner, "home", namespaces="team-a: 1")
    page = tuner.get("/policy/home/")
    fields = {f.name: f.value for section in page.context["sections"].values() for f in section}
    fields.update(namespaces="team-a: 5", carried=json.dumps({"slack_buckets": {"cpu": -5}}), action="save")
    refused = tuner.post("/policy/home/", fields)
    assert refused.status_code == 400
    assert "Refused, nothing changed" in refused.context["form_error"]
    assert "spec.placement.slack_buckets.cpu" in refused.context["form_error"]
    fields.update(carried=page.context["carried"], **{"placement.weight_image": "-1"})
    refused = tuner.post("/policy/home/", fields)
    assert refused.status_code == 400 and "placement.weight_image" in refused.context["errors"]
    assert list(PolicyVersion.objects.filter(cluster=live).values_list("version", flat=True)) == [1]
    s.run_pass(now_s=1000.0)
    assert s.current.version == 1 and s.current.policy.placement.namespace_batch_caps == (("team-a", 1),)


# -- escalation ------------------------------------------------------------------------------------

def test_escalation_cools_a_node_down_for_the_saved_cooldown(live, tuner):
    from kalena_web.control.models import NodeCondition
    from kalena_web.control.tasks import escalate

    save_in_console(tuner, "home", escalation__cooldown_s="1800")
    storm = live.nodes.get(name=NODES[0])
    for i, t in enumerate((1100.0, 1250.0, 1390.0)):  # 3 evictions within the 300 s window: a storm
        EvictionRecord.objects.create(cluster=live, node=storm, workload_name=f"batch/x-{i}", time_s=t,
                                      cause="priority", source_key=f"agent:storm:{i}")
    escalate(cluster_id=live.id, now_s=1400.0)
    assert NodeCondition.objects.get(node=storm).slack_ineligible_until_s == 1400.0 + 1800.0
    assert PolicyApplied.objects.get(cluster=live, part="escalation").version == 1


# -- the scheduler extender ------------------------------------------------------------------------

def extender(client, verb: str, pod_json: dict) -> object:
    """Call the extender as kube-scheduler does: through the hooks listener's own URL map (the
    console's port routes no ``/kubernetes/`` path), in extender mode, with the pod's uid."""
    from django.test import override_settings

    from kalena_web.kubehooks.routing import HOOKS_URLCONF

    pod_json = {**pod_json, "metadata": {"uid": f"uid-{pod_json['metadata']['name']}", **pod_json["metadata"]}}
    with override_settings(ROOT_URLCONF=HOOKS_URLCONF, KALENA_ADMISSION_EXTENDER_MODE=True,
                           KALENA_ORCHESTRATOR="kubernetes"):
        response = client.post(f"/kubernetes/extender/home/{verb}", content_type="application/json",
                               data=json.dumps({"Pod": pod_json, "NodeNames": NODES}))
    assert response.status_code == 200, response.content
    return response.json()


def test_the_extender_filters_with_the_saved_cap(live, tuner):
    candidate = job_pod("team-b", "sweep", "k8m2n", cpu="500m")
    assert sorted(extender(tuner, "filter", candidate)["NodeNames"]) == sorted(NODES)
    assert PolicyApplied.objects.get(cluster=live, part="extender").version == 0
    save_in_console(tuner, "home", namespaces="team-b: 0")
    result = extender(tuner, "filter", candidate)
    assert result["NodeNames"] == [] and set(result["FailedNodes"]) == set(NODES)
    says = "namespace_cap (namespace team-b, running 0, cap 0)"
    assert all(m.startswith(says) for m in result["FailedNodes"].values())
    # prioritize reads the same version: no node is feasible, every score 0
    assert [h["Score"] for h in extender(tuner, "prioritize", candidate)] == [0, 0, 0]
    assert PolicyApplied.objects.get(cluster=live, part="extender").version == 1


def test_the_extender_scores_with_the_saved_weights(live, tuner):
    """Only image locality weighted: a pod whose image no node holds scores 0 everywhere (with
    the default weights the balance and volatility scores make it positive somewhere)."""
    candidate = job_pod("batch", "train", "p4r7s", cpu="500m")
    assert max(h["Score"] for h in extender(tuner, "prioritize", candidate)) > 0
    save_in_console(tuner, "home", placement__weight_balance="0", placement__weight_colocation="0",
                    placement__weight_volatility="0", placement__weight_image="1")
    assert [h["Score"] for h in extender(tuner, "prioritize", candidate)] == [0, 0, 0]


# -- the batch-capacity publisher ------------------------------------------------------------------

@pytest.fixture
def kube_settings(api, settings, tmp_path, monkeypatch):
    """``KALENA_ORCHESTRATOR=kubernetes`` with a kubeconfig pointing at the test API server."""
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "t",
        "clusters": [{"name": "t", "cluster": {"server": api.url}}],
        "contexts": [{"name": "t", "context": {"cluster": "t", "user": "u"}}], "users": [{"name": "u", "user": {}}]}))
    monkeypatch.setattr("kubernetes.config.kube_config.KUBE_CONFIG_DEFAULT_LOCATION", str(kubeconfig))
    settings.KALENA_ORCHESTRATOR = "kubernetes"
    default = k8s.Configuration.get_default_copy()
    try:
        yield api
    finally:
        k8s.Configuration.set_default(default)


def test_the_publisher_raises_by_the_saved_bucket(live, kube_settings, tuner):
    """The publisher raises a node's batch-cpu only by at least one cpu slack bucket (50 mcpu by
    default). With a 1000 mcpu bucket saved (a policy file imported in the console), production
    falling by 500 mcpu no longer raises it: 500 < 1000."""
    from django.core.files.uploadedfile import SimpleUploadedFile

    from kalena_web.kubehooks.tasks import publish

    api = kube_settings
    first = NODES[0]
    led = LiveNodeLedger.objects.get(node__cluster=live, node__name=first)
    publish(now_s=1000.0)
    published = PublishedBatch.objects.get(node=led.node).cpu_mcpu
    # production rises by 0.5 core: lowered at once
    risen = (np.asarray(led.prod_reservation) + np.array([500.0] + [0.0] * 7)).tolist()
    LiveNodeLedger.objects.filter(id=led.id).update(prod_reservation=risen)
    publish(now_s=1010.0)
    assert PublishedBatch.objects.get(node=led.node).cpu_mcpu == published - 500
    assert PolicyApplied.objects.get(cluster=live, part="publisher").version == 0

    spec = {"placement": {"slack_buckets": {"cpu": 1000}}}
    text = yaml.safe_dump({"apiVersion": "kalena.naughtian.io/v1", "kind": "Policy", "metadata": {}, "spec": spec})
    draft = tuner.post("/policy/home/import", {"file": SimpleUploadedFile("buckets.yaml", text.encode())})
    assert draft.status_code == 200, draft.context["form_error"]
    fields = {f.name: f.value for section in draft.context["sections"].values() for f in section}
    fields.update(namespaces=draft.context["namespaces"], origin=draft.context["origin"],
                  carried=draft.context["carried"], action="save")
    assert tuner.post("/policy/home/", fields).status_code == 302
    assert PolicyVersion.objects.get(cluster=live).document["spec"]["placement"]["slack_buckets"]["cpu"] == 1000

    # production falls back 60 s later: +500 mcpu of room, under the saved 1000 mcpu bucket
    LiveNodeLedger.objects.filter(id=led.id).update(prod_reservation=led.prod_reservation)
    publish(now_s=1070.0)
    assert PublishedBatch.objects.get(node=led.node).cpu_mcpu == published - 500
    allocatable = api.get("nodes", first)["status"]["allocatable"]
    assert allocatable["kalena.naughtian.io/batch-cpu"] == str(int(published - 500))
    assert PolicyApplied.objects.get(cluster=live, part="publisher").version == 1


# -- the policy page -------------------------------------------------------------------------------

def test_the_policy_page_shows_the_version_each_part_applies_and_flags_a_part_behind(live, api, tuner):
    s = lease_holder(live, api)
    s.run_pass(now_s=1000.0)
    extender(tuner, "filter", job_pod("batch", "train", "p4r7s"))
    save_in_console(tuner, "home", namespaces="team-a: 4")
    s.run_pass(now_s=1002.0)  # the scheduler has moved to version 1; the extender has not been called since

    page = tuner.get("/policy/home/")
    parts = {p.part: p for p in page.context["parts"]}
    assert (parts["scheduler"].version, parts["scheduler"].behind) == (1, False)
    assert (parts["extender"].version, parts["extender"].behind) == (0, True)
    assert parts["publisher"].version is None and not parts["publisher"].behind  # never ran (no publish loop here)
    html = page.content.decode()
    assert "behind: v0, current v1" in html and 'id="parts-policy"' in html
    assert [p.part for p in page.context["parts_behind"]] == ["extender"]

    extender(tuner, "filter", job_pod("batch", "train", "p4r7s"))
    page = tuner.get("/policy/home/")
    assert page.context["parts_behind"] == [] and "behind: v" not in page.content.decode()
