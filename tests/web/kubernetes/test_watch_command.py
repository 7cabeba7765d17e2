"""`kalena watch` dispatch and the REST path on a Kubernetes-watched cluster."""

from __future__ import annotations

import json

import pytest
from django.contrib.auth.models import Group, User

from agents.orchestrators.events import PodPending
from kalena_web.cli import main
from kalena_web.cli.watch import live_cluster_named
from kalena_web.control.reconciler import Reconciler
from kalena_engine.errors import InputError


def test_watch_names_the_orchestrators_that_have_a_watcher(live, settings, capsys) -> None:
    settings.KALENA_ORCHESTRATOR = "fake"
    assert main(["watch"]) == 2
    err = capsys.readouterr().err
    assert "KALENA_ORCHESTRATOR='fake' has no watcher" in err and "kubernetes" in err


def test_watch_picks_the_live_cluster_by_name(live) -> None:
    assert live_cluster_named("").name == "home" and live_cluster_named("home").id == live.id
    with pytest.raises(InputError, match="no live cluster named 'nope'.*home"):
        live_cluster_named("nope")


@pytest.fixture
def operator(client, live):
    user = User.objects.create_user("op", password="x" * 12)
    user.groups.add(Group.objects.get(name="operator"))
    client.force_login(user)
    return client


def test_on_kubernetes_pods_come_from_the_watch_not_rest(operator, live, settings) -> None:
    settings.KALENA_ORCHESTRATOR = "kubernetes"
    body = {"name": "batch/train-0", "owner": "train", "request": {"cpu": "500m", "ram": "2Gi"}}
    response = operator.post("/api/clusters/home/batch", json.dumps(body), content_type="application/json")
    assert response.status_code == 409 and "schedulerName: kalena" in response.json()["detail"]
    Reconciler(cluster=live).apply(PodPending("batch/w-0", (500.0, 2**30) + (0.0,) * 6, (500.0, 2**30) + (0.0,) * 6))
    from kalena_web.scheduling.models import BatchPod
    BatchPod.objects.filter(workload__name="batch/w-0").update(state="bound")
    answer = operator.post("/api/clusters/home/batch/batch/w-0/complete")
    assert answer.status_code == 409 and "observed, not reported" in answer.json()["detail"]


def test_watch_without_kubernetes_credentials_says_so(live, settings, capsys, monkeypatch, tmp_path) -> None:
    settings.KALENA_ORCHESTRATOR = "kubernetes"
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "missing"))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    assert main(["watch"]) == 2
    assert "no in-cluster or kubeconfig credentials" in capsys.readouterr().err


def test_the_watch_takes_what_it_made_while_starting_out_of_the_collectors_sight() -> None:
    """``kalena watch`` freezes its start-up objects before it starts: a full collection of the
    long-running process then scans only what it made since (each one scanned some 200,000
    objects, about 0.1 s of CPU, before)."""
    import gc

    from kalena_web.cli.watch import startup_frozen

    gc.collect()
    tracked = len(gc.get_objects())
    try:
        assert startup_frozen() >= tracked * 0.9
        assert len(gc.get_objects()) < tracked / 10  # what a full collection now looks at
    finally:
        gc.unfreeze()
