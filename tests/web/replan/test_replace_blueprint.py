"""Re-plan adoption: Kuberina's new blueprint loaded for an existing live cluster
(``kalena cluster import NAME --replace-blueprint``, or approve with the new blueprint on the
re-plan page) keeps the archive and the live state, re-charges production where the new
blueprint puts it and clears the fidelity findings it resolves; a blueprint for other nodes or
other pods is refused naming what and where, and changes nothing."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import yaml
from django.contrib.auth.models import Permission, User
from django.core.files.uploadedfile import SimpleUploadedFile
from django.urls import reverse

from agents.orchestrators.events import PodPending, PodRunning, ProductionSeen
from kalena_engine.resources import CPU
from kalena_web.archive.models import EvictionRecord, UsageRollup
from kalena_web.cli import main as kalena
from kalena_web.control.models import ProductionPlacement
from kalena_web.control.reconciler import Reconciler
from kalena_web.inventory.models import Cluster, Node, Workload
from kalena_web.ledger.models import LiveNodeLedger, WorkloadReservation
from kalena_web.policy.models import AuditEntry
from kalena_web.replan.models import ReplanRecommendation
from kalena_web.scheduling.models import BatchPod

GIB = 2**30
# the live fixture's blueprint: alpha nextcloud, jellyfin, vaultwarden, mosquitto; beta postgres,
# grafana, home-assistant, zigbee2mqtt; gamma pihole, prometheus
OLD = {"cloud/nextcloud-0": "thinkcentre-alpha", "database/postgres-0": "thinkcentre-beta",
       "dns/pihole-0": "thinkcentre-gamma", "media/jellyfin-0": "thinkcentre-alpha",
       "monitoring/grafana-0": "thinkcentre-beta", "monitoring/prometheus-0": "thinkcentre-gamma",
       "security/vaultwarden-0": "thinkcentre-alpha", "smart-home/home-assistant-0": "thinkcentre-beta",
       "smart-home/zigbee2mqtt-0": "thinkcentre-beta", "smart-home/mosquitto-0": "thinkcentre-alpha"}
# Kuberina's re-plan: jellyfin (2 cores, already running on gamma: a finding) and vaultwarden
# (0.2 cores, not seen live) move to gamma
NEW = {**OLD, "media/jellyfin-0": "thinkcentre-gamma", "security/vaultwarden-0": "thinkcentre-gamma"}


def write_blueprint(path: Path, assignment: dict[str, str]) -> Path:
    path.write_text("solution:\n" + "".join(f"  {p}: {n}\n" for p, n in assignment.items()))
    return path


def cpu_by_node(cluster) -> dict[str, tuple[float, float, float, float]]:
    """Per node: production request and reservation, batch request and reservation (cpu, mcpu)."""
    return {led.node.name: (led.prod_request[CPU], led.prod_reservation[CPU], led.batch_request[CPU],
                            led.batch_reservation[CPU])
            for led in LiveNodeLedger.objects.filter(node__cluster=cluster).select_related("node")}


def state_of(cluster) -> tuple:
    """Everything adoption may change, to compare before and after a refusal."""
    return (cpu_by_node(cluster),
            sorted(Workload.objects.filter(cluster=cluster).values_list("name", "node__name", "request")),
            sorted(ProductionPlacement.objects.filter(workload__cluster=cluster).values_list(
                "workload__name", "blueprint_node__name", "finding")),
            sorted(LiveNodeLedger.objects.filter(node__cluster=cluster).values_list("node__name",
                                                                                    "blueprint_workloads")),
            Cluster.objects.get(id=cluster.id).sources,
            AuditEntry.objects.filter(action="cluster.replace_blueprint").count())


@pytest.fixture
def running(live):
    """The live cluster as the watch left it: jellyfin seen running on gamma (off its blueprint
    node: a finding), a batch pod bound and running on alpha, archive and telemetry rows."""
    rec = Reconciler(live, clock=lambda: 1000.0)
    jellyfin = Workload.objects.get(cluster=live, name="media/jellyfin-0")
    rec.apply(ProductionSeen("media/jellyfin-0", "thinkcentre-gamma", tuple(jellyfin.request), tuple(jellyfin.limit),
                             at_s=1000.0))
    assert ProductionPlacement.objects.get(workload=jellyfin).finding
    one_core = (1000.0, 1.0 * GIB, 0, 0, 0, 0, 0, 0)
    rec.apply(PodPending("batch/train-0", one_core, one_core, owner="Job/train", at_s=1000.0))
    rec.apply(PodRunning("batch/train-0", "thinkcentre-alpha", at_s=1001.0))
    assert BatchPod.objects.get(workload__name="batch/train-0").state == "bound"
    alpha = Node.objects.get(cluster=live, name="thinkcentre-alpha")
    EvictionRecord.objects.create(cluster=live, node=alpha, workload_name="batch/old-0", time_s=900.0,
                                  cause="priority", source_key="replace-test")
    UsageRollup.objects.create(cluster=live, resolution="1m", bucket_s=960.0, workload=jellyfin, samples=4,
                               usage_mean=[1500.0] + [0.0] * 7, usage_peak=[1800.0] + [0.0] * 7,
                               reservation=[1900.0] + [0.0] * 7)
    return live


def test_cluster_import_replace_blueprint_adopts_the_replan_and_keeps_the_live_state(running, kuberina_dir,
                                                                                     tmp_path, capsys) -> None:
    files = ["--infra", str(kuberina_dir / "homelab/homelab_infra.yaml"),
             "--workloads", str(kuberina_dir / "homelab/homelab_workloads.yaml")]
    before = cpu_by_node(running)
    # jellyfin's 2 cores are charged where it runs (gamma) already; vaultwarden's 0.2 on alpha
    assert before["thinkcentre-gamma"][0] == pytest.approx(700.0 + 2000.0)
    new = write_blueprint(tmp_path / "replan.yaml", NEW)
    assert kalena(["cluster", "import", "home", *files, "--blueprint", str(new)]) == 2  # the name is taken
    assert "exists already" in capsys.readouterr().err
    assert kalena(["cluster", "import", "home", *files, "--blueprint", str(new), "--replace-blueprint"]) == 0
    out = capsys.readouterr().out
    assert "2 production pods moved, 1 re-charged, 1 fidelity findings resolved, 0 open" in out
    after = cpu_by_node(running)
    # vaultwarden's charge moved alpha → gamma; jellyfin stays charged on gamma, now its blueprint node
    assert after["thinkcentre-alpha"][0] == pytest.approx(before["thinkcentre-alpha"][0] - 200.0)
    assert after["thinkcentre-gamma"][0] == pytest.approx(before["thinkcentre-gamma"][0] + 200.0)
    assert after["thinkcentre-beta"][:2] == before["thinkcentre-beta"][:2]
    # batch's ledger debits are untouched
    assert {n: v[2:] for n, v in after.items()} == {n: v[2:] for n, v in before.items()}
    jellyfin = ProductionPlacement.objects.select_related("blueprint_node", "seen_node").get(
        workload__name="media/jellyfin-0")
    assert (jellyfin.blueprint_node.name, jellyfin.seen_node.name, jellyfin.finding) == (
        "thinkcentre-gamma", "thinkcentre-gamma", False)
    gamma = LiveNodeLedger.objects.get(node__cluster=running, node__name="thinkcentre-gamma")
    assert sorted(Workload.objects.filter(id__in=gamma.blueprint_workloads).values_list("name", flat=True)) == [
        "dns/pihole-0", "media/jellyfin-0", "monitoring/prometheus-0", "security/vaultwarden-0"]
    # the archive, the telemetry and the batch pod are all still there
    pod = BatchPod.objects.select_related("workload__node").get(workload__name="batch/train-0")
    assert (pod.state, pod.workload.node.name) == ("bound", "thinkcentre-alpha")
    assert EvictionRecord.objects.filter(cluster=running, source_key="replace-test").exists()
    assert UsageRollup.objects.filter(cluster=running, workload__name="media/jellyfin-0").count() == 1
    assert Cluster.objects.get(id=running.id).sources["blueprint"] == str(new)
    audit = AuditEntry.objects.get(action="cluster.replace_blueprint")
    assert audit.cluster_name == "home" and audit.actor.startswith("cli:")
    assert audit.before["findings"] == 1 and audit.after["findings"] == 0
    assert sorted(audit.after["moved"]) == ["media/jellyfin-0", "security/vaultwarden-0"]


def test_a_blueprint_for_other_nodes_or_pods_is_refused_and_changes_nothing(running, kuberina_dir, tmp_path,
                                                                           capsys) -> None:
    infra_doc = yaml.safe_load((kuberina_dir / "homelab/homelab_infra.yaml").read_text())
    delta = {**infra_doc["nodes"][0], "name": "thinkcentre-delta"}
    infra_doc["nodes"].append(delta)
    other_infra = tmp_path / "infra-with-delta.yaml"
    other_infra.write_text(yaml.safe_dump(infra_doc))
    workloads = str(kuberina_dir / "homelab/homelab_workloads.yaml")
    untouched = state_of(running)
    onto_delta = write_blueprint(tmp_path / "delta.yaml", {**NEW, "media/jellyfin-0": "thinkcentre-delta"})
    assert kalena(["cluster", "import", "home", "--replace-blueprint", "--infra", str(other_infra),
                   "--workloads", workloads, "--blueprint", str(onto_delta)]) == 2
    err = capsys.readouterr().err
    assert "not nodes of cluster 'home': thinkcentre-delta" in err and str(other_infra) in err
    # pods of another IR: the workloads gained a service the cluster does not run
    work_doc = yaml.safe_load((kuberina_dir / "homelab/homelab_workloads.yaml").read_text())
    jellyfin = work_doc["namespaces"]["media"][0]
    work_doc["namespaces"]["media"].append({**jellyfin, "name": "plex",
                                            "requests": {**jellyfin["requests"], "cpu": 0.1, "ram": "128Mi"}})
    other_workloads = tmp_path / "workloads-with-plex.yaml"
    other_workloads.write_text(yaml.safe_dump(work_doc))
    with_plex = write_blueprint(tmp_path / "plex.yaml", {**NEW, "media/plex-0": "thinkcentre-beta"})
    assert kalena(["cluster", "import", "home", "--replace-blueprint", "--infra",
                   str(kuberina_dir / "homelab/homelab_infra.yaml"), "--workloads", str(other_workloads),
                   "--blueprint", str(with_plex)]) == 2
    err = capsys.readouterr().err
    assert "does not hold (e.g. media/plex-0)" in err and str(other_workloads) in err
    # a blueprint that leaves a pod out is a hard violation of its own
    partial = {k: v for k, v in NEW.items() if k != "dns/pihole-0"}
    assert kalena(["cluster", "import", "home", "--replace-blueprint", "--infra",
                   str(kuberina_dir / "homelab/homelab_infra.yaml"), "--workloads", workloads,
                   "--blueprint", str(write_blueprint(tmp_path / "partial.yaml", partial))]) == 2
    assert "unassigned 1" in capsys.readouterr().err
    assert kalena(["cluster", "import", "nosuch", "--replace-blueprint", "--infra",
                   str(kuberina_dir / "homelab/homelab_infra.yaml"), "--workloads", workloads,
                   "--blueprint", str(write_blueprint(tmp_path / "new.yaml", NEW))]) == 2
    assert "no live cluster named 'nosuch'" in capsys.readouterr().err
    assert state_of(running) == untouched


def test_approving_with_the_new_blueprint_on_the_replan_page_adopts_it(running, client, tmp_path) -> None:
    rec = ReplanRecommendation.objects.create(cluster=running, created_s=1000.0, window_s=86_400.0, threshold=0.25,
                                              drift={"cpu": 0.4, "ram": 0.3},
                                              workloads_yaml=running.workloads_document)
    approver = User.objects.create_user("approver", password="x" * 12)
    approver.user_permissions.add(Permission.objects.get(codename="approve_replan"))
    client.force_login(approver)
    page = client.get(reverse("console:live_replan", args=["home"])).content.decode()
    assert 'enctype="multipart/form-data"' in page and 'name="blueprint"' in page
    url = reverse("console:live_decide", args=["home", rec.id])
    untouched = state_of(running)
    bad = "solution:\n" + "".join(f"  {p}: {'thinkcentre-omega' if p == 'media/jellyfin-0' else n}\n"
                                  for p, n in NEW.items())
    refused = client.post(url, {"decision": "approve", "blueprint": SimpleUploadedFile("replan.yaml", bad.encode())})
    assert refused.status_code == 400
    assert "node_missing" in refused.content.decode() and "uploaded replan.yaml" in refused.content.decode()
    assert ReplanRecommendation.objects.get(id=rec.id).state == "open"  # nothing decided
    assert state_of(running) == untouched
    good = "".join(f"  {p}: {n}\n" for p, n in NEW.items())
    answer = client.post(url, {"decision": "approve", "note": "adopt Kuberina's re-plan",
                               "blueprint": SimpleUploadedFile("replan.yaml", ("solution:\n" + good).encode())})
    assert answer.status_code == 302
    assert ReplanRecommendation.objects.get(id=rec.id).state == "approved"
    assert Workload.objects.get(cluster=running, name="security/vaultwarden-0").node.name == "thinkcentre-gamma"
    assert not ProductionPlacement.objects.filter(workload__cluster=running, finding=True).exists()
    assert AuditEntry.objects.get(action="cluster.replace_blueprint").actor == "approver"
    assert WorkloadReservation.objects.filter(workload__cluster=running, workload__kind="production").count() == 10
    assert np.isclose(sum(v[0] for v in cpu_by_node(running).values()),
                      sum(w.request[CPU] for w in Workload.objects.filter(cluster=running, kind="production")))


def test_the_api_decision_with_a_blueprint_adopts_it(running, client) -> None:
    import json

    rec = ReplanRecommendation.objects.create(cluster=running, created_s=1000.0, window_s=86_400.0, threshold=0.25,
                                              drift={"cpu": 0.4, "ram": 0.3},
                                              workloads_yaml=running.workloads_document)
    approver = User.objects.create_user("approver", password="x" * 12)
    approver.user_permissions.add(Permission.objects.get(codename="approve_replan"))
    client.force_login(approver)
    url = f"/api/clusters/home/recommendations/{rec.id}/decision"
    untouched = state_of(running)
    partial = "solution:\n" + "".join(f"  {p}: {n}\n" for p, n in NEW.items() if p != "dns/pihole-0")
    refused = client.post(url, json.dumps({"approve": True, "blueprint": partial}), content_type="application/json")
    assert refused.status_code == 400 and "unassigned 1" in refused.json()["detail"]
    assert state_of(running) == untouched and ReplanRecommendation.objects.get(id=rec.id).state == "open"
    whole = "solution:\n" + "".join(f"  {p}: {n}\n" for p, n in NEW.items())
    answer = client.post(url, json.dumps({"approve": True, "blueprint": whole}), content_type="application/json")
    assert answer.status_code == 200 and answer.json()["state"] == "approved"
    assert Workload.objects.get(cluster=running, name="security/vaultwarden-0").node.name == "thinkcentre-gamma"
