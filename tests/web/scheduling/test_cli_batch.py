"""``kalena batch`` as an operator runs it against the live homelab cluster: submit, list, show,
complete and delete with ``--json`` answers shaped like the REST API's, and the same refusals
as the REST API for the same bad input (exit 2, the message names the field, nothing stored).
``complete`` is refused where the orchestrator observes completion."""

from __future__ import annotations

import json

import pytest
from django.test import override_settings

from kalena_web.cli import main
from kalena_web.scheduling.models import BatchPod
from tests.web.scheduling.test_api import api, post  # noqa: F401 - the REST client fixture


def kalena(capsys, *argv: str) -> tuple[int, str, str]:
    status = main(list(argv))
    out = capsys.readouterr()
    return status, out.out, out.err


def test_submit_list_show_complete_delete(live, capsys, api, django_capture_on_commit_callbacks) -> None:  # noqa: F811
    with django_capture_on_commit_callbacks(execute=True):  # the event-driven pass runs after the commit
        status, out, _ = kalena(capsys, "batch", "submit", "home", "batch/train-0", "--request", "cpu=250m,ram=256Mi",
                                "--limit", "cpu=0.5,ram=512Mi", "--priority", "3", "--label", "team=ml",
                                "--image", "kalena/busybox:test", "--json", "--command", "sh -c 'sleep 5'")
    assert status == 0
    pod = json.loads(out)
    stored = BatchPod.objects.select_related("workload").get(workload__name="batch/train-0")
    assert stored.state == BatchPod.BOUND  # the submission asked for a pass, as REST does
    assert stored.command == ["sh", "-c", "sleep 5"] and stored.workload.labels["team"] == "ml"
    assert stored.workload.request[0] == 250 and stored.workload.limit[1] == 512 * 2**20
    rest = api.get("/api/clusters/home/batch?state=bound").json()
    assert set(rest[0]) <= set(pod) and rest[0]["name"] == pod["name"] and rest[0]["request"] == pod["request"]

    status, out, _ = kalena(capsys, "batch", "list", "home", "--state", "bound", "--json")
    assert status == 0 and json.loads(out) == rest  # the REST answer, exactly
    status, out, _ = kalena(capsys, "batch", "show", "home", "batch/train-0")
    assert status == 0 and out.startswith("Name:") and "batch/train-0" in out and "State:     running" in out
    assert "Priority:  3" in out
    status, out, _ = kalena(capsys, "batch", "complete", "home", "batch/train-0", "--json")
    assert status == 0 and json.loads(out)["state"] == "completed"
    status, _, err = kalena(capsys, "batch", "delete", "home", "batch/train-0")
    detail = api.delete("/api/clusters/home/batch/batch/train-0").json()["detail"]
    assert status == 2 and "already completed" in err and detail in err

    status, _, _ = kalena(capsys, "batch", "submit", "home", "batch/idle-0", "--request", "cpu=100m")
    assert status == 0  # no pass ran (no commit callbacks): it stays pending
    status, _, err = kalena(capsys, "batch", "complete", "home", "batch/idle-0")
    detail = api.post("/api/clusters/home/batch/batch/idle-0/complete").json()["detail"]
    assert status == 2 and detail in err and "pending" in err  # the REST refusal, word for word
    status, out, _ = kalena(capsys, "batch", "delete", "home", "batch/idle-0", "--json")
    assert status == 0 and json.loads(out)["state"] == "deleted"


@pytest.mark.parametrize(("argv", "body", "words"), [
    pytest.param(["Batch/X", "--request", "cpu=1"], {"name": "Batch/X", "request": {"cpu": 1}}, ["name"],
                 id="not a DNS-1123 name"),
    pytest.param(["batch/a", "--request", "gpu=1"], {"name": "batch/a", "request": {"gpu": 1}}, ["cpu or ram"],
                 id="no cpu or ram"),
    pytest.param(["batch/a", "--request", "cpu=1", "--priority", "-1"],
                 {"name": "batch/a", "request": {"cpu": 1}, "priority": -1}, ["priority"], id="negative priority"),
    pytest.param(["batch/a", "--request", "cpu=1", "--constraints", '{"nodeSelector": {"a": "b"}}'],
                 {"name": "batch/a", "request": {"cpu": 1}, "constraints": {"nodeSelector": {"a": "b"}}},
                 ["nodeSelector", "node_selector"], id="unknown constraint"),
])
def test_bad_input_is_refused_as_the_rest_api_refuses_it(live, capsys, api, argv, body, words) -> None:  # noqa: F811
    status, _, err = kalena(capsys, "batch", "submit", "home", *argv)
    response = post(api, body)
    # REST: 422, the body's schema states each of these rules; the CLI refuses them in the same words
    assert status == 2 and response.status_code == 422
    for word in words:
        assert word in err and word in response.json()["detail"]
    assert not BatchPod.objects.exists()


def test_cli_own_argument_errors_name_the_flag(live, capsys) -> None:
    for argv, flag in ((["batch", "submit", "home", "batch/a", "--request", "cpu"], "request"),
                       (["batch", "submit", "home", "batch/a", "--request", "cpu=1", "--label", "x"], "--label"),
                       (["batch", "list", "home", "--state", "lost"], "--state")):
        status, _, err = kalena(capsys, *argv)
        assert status == 2 and flag in err, (argv, err)
    for argv, what in ((["batch", "submit", "nope", "batch/a", "--request", "cpu=1"], "no live cluster"),
                       (["batch", "show", "home", "batch/none"], "no batch pod"),
                       (["batch", "get", "home", "batch/none"], "no batch pod"),
                       (["get", "nodes", "nope"], "no live cluster")):
        status, _, err = kalena(capsys, *argv)
        assert status == 1 and what in err, (argv, err)  # not found: 1, as kubectl
    assert not BatchPod.objects.exists()


@override_settings(KALENA_ORCHESTRATOR="docker")
def test_complete_is_refused_where_the_orchestrator_observes_completion(live, capsys, api) -> None:  # noqa: F811
    BatchPod.objects.all().delete()
    status, _, _ = kalena(capsys, "batch", "submit", "home", "batch/obs-0", "--request", "cpu=100m")
    assert status == 0
    BatchPod.objects.filter(workload__name="batch/obs-0").update(state=BatchPod.BOUND)
    status, _, err = kalena(capsys, "batch", "complete", "home", "batch/obs-0")
    assert status == 2 and "observed from the orchestrator (docker)" in err
    response = api.post("/api/clusters/home/batch/batch/obs-0/complete")
    assert response.status_code == 409 and "observed from the orchestrator" in response.json()["detail"]
    assert BatchPod.objects.get(workload__name="batch/obs-0").state == BatchPod.BOUND  # unchanged


def test_manual_complete_and_delete_are_audited_as_the_command_line(live, capsys,
                                                                   django_capture_on_commit_callbacks) -> None:
    """A hand-made completion or deletion is the operator's action (issue 15: manual actions),
    not the reconciler loop's."""
    from kalena_web.policy.models import AuditEntry

    with django_capture_on_commit_callbacks(execute=True):
        assert kalena(capsys, "batch", "submit", "home", "batch/done-0", "--request", "cpu=100m")[0] == 0
    assert kalena(capsys, "batch", "submit", "home", "batch/gone-0", "--request", "cpu=100m")[0] == 0
    assert kalena(capsys, "batch", "complete", "home", "batch/done-0")[0] == 0
    assert kalena(capsys, "batch", "delete", "home", "batch/gone-0")[0] == 0
    rows = {a: (k, who) for a, k, who in AuditEntry.objects.filter(action__in=["batch.complete", "batch.delete"])
            .values_list("action", "actor_kind", "actor")}
    assert rows == {"batch.complete": ("user", "cli"), "batch.delete": ("user", "cli")}


def test_a_retried_submit_prints_the_pod_and_another_spec_names_the_fields(live, capsys) -> None:
    argv = ("batch", "submit", "home", "batch/again-0", "--request", "cpu=250m,ram=256Mi", "--json")
    status, first, _ = kalena(capsys, *argv)
    assert status == 0
    status, again, err = kalena(capsys, *argv)  # the answer was lost: the same command again
    assert status == 0 and json.loads(again) == json.loads(first) and "already submitted" in err
    status, _, err = kalena(capsys, *argv, "--priority", "9")
    assert status == 2 and "batch/again-0" in err and "priority" in err
    assert BatchPod.objects.filter(workload__name="batch/again-0").count() == 1


def test_get_prints_tables_like_kubectl_and_yaml_on_request(live, capsys) -> None:
    import yaml

    assert kalena(capsys, "batch", "submit", "home", "batch/table-0", "--request", "cpu=250m,ram=512Mi",
                  "--priority", "4", "--owner", "etl")[0] == 0
    assert kalena(capsys, "batch", "submit", "home", "batch/table-1", "--request", "cpu=2,ram=1Gi")[0] == 0
    status, out, _ = kalena(capsys, "batch", "get", "home")
    lines = out.splitlines()
    assert status == 0 and lines[0].split() == ["NAME", "STATE", "NODE", "PRIORITY", "CPU", "RAM", "AGE"]
    assert lines[1].split()[:6] == ["batch/table-0", "pending", "<none>", "4", "0.25", "0.5Gi"]
    assert lines[2].split()[:6] == ["batch/table-1", "pending", "<none>", "0", "2", "1Gi"]
    assert "{" not in out and "'" not in out  # no Python dicts
    status, out, _ = kalena(capsys, "batch", "get", "home", "-o", "wide")
    assert out.splitlines()[0].split()[-5:] == ["OWNER", "REQUEUES", "WHY", "PENDING", "OUTCOME"]
    assert " etl " in out.splitlines()[1]
    status, out, _ = kalena(capsys, "batch", "get", "home", "batch/table-0", "-o", "yaml")
    pod = yaml.safe_load(out)
    assert status == 0 and pod["name"] == "batch/table-0" and pod["request"]["cpu"] == 0.25
    status, out, _ = kalena(capsys, "batch", "get", "home", "-o", "json")
    assert [p["name"] for p in json.loads(out)] == ["batch/table-0", "batch/table-1"]
    status, out, _ = kalena(capsys, "get", "nodes", "home")
    header, *rows = out.splitlines()
    assert header.split()[:4] == ["NAME", "STATUS", "CPU", "SLACK"] and len(rows) == 3
    nodes = {n["name"]: n for n in yaml.safe_load(kalena(capsys, "get", "nodes", "home", "-o", "yaml")[1])}
    beta = nodes["thinkcentre-beta"]
    assert beta["slack"]["cpu"] == pytest.approx(beta["capacity"]["cpu"] - beta["reservations"]["cpu"])
    assert any(r.startswith("thinkcentre-beta ") and f" {beta['slack']['cpu']:g} " in f" {r} " for r in rows)


def test_each_command_loads_only_its_module_and_parses_as_with_every_module() -> None:
    from kalena_web.cli import COMMANDS, build_parser

    full = build_parser()
    names = set(full._subparsers._group_actions[0].choices)
    assert names == set(COMMANDS)  # every command the full parser knows is found by its own name
    for name in COMMANDS:
        alone = build_parser(name)
        assert name in alone._subparsers._group_actions[0].choices
        assert len(alone._subparsers._group_actions[0].choices) <= 2  # its module's commands only


def test_a_pod_its_engine_cannot_run_shows_the_engines_words(live, capsys) -> None:
    """``get -o wide``, ``describe`` (text and yaml) and the console's pending page name the node
    that refused to run the pod, with the engine's error, and when it is tried next."""
    import numpy as np
    from django.test import Client
    from django.urls import reverse
    from django.contrib.auth.models import User

    from kalena_engine.policy import Policy
    from kalena_web.scheduling.services import scheduling_pass
    from tests.web.scheduling.test_scheduling_pass import UnpullableOrchestrator, submit

    submit(live, "batch/nope-0", cpu=0.5, image="kalena/nope:1")
    orch = UnpullableOrchestrator(node_names=["thinkcentre-alpha", "thinkcentre-beta", "thinkcentre-gamma"])
    orch.tried = []
    scheduling_pass(cluster=live, orchestrator=orch, policy=Policy(), now_s=1001.0, rng=np.random.default_rng(0))
    node = orch.tried[0]
    status, out, _ = kalena(capsys, "batch", "get", "home", "-o", "wide")
    assert status == 0 and f"{node} refused: engine unix:///run/{node}/docker.sock" in out and "no such host" in out
    status, out, _ = kalena(capsys, "batch", "describe", "home", "batch/nope-0")
    assert status == 0 and f"{node} refused to run it: engine unix:///run/{node}" in out
    assert "Next attempt at 00:16:51 UTC (backoff after 1 refusal)" in out and "avoided until" in out
    status, out, _ = kalena(capsys, "batch", "describe", "home", "batch/nope-0", "-o", "json")
    answer = json.loads(out)
    assert "no such host" in answer["reason"] and answer["why_pending"]["refused"][0]["node"] == node
    client = Client()
    client.force_login(User.objects.create_superuser("root", "r@x", "pw"))
    page = client.get(reverse("console:live_pending", args=["home"])).content.decode()
    assert "no such host" in page and node in page


def test_a_drained_node_reads_ready_scheduling_disabled(live, capsys) -> None:
    """A Swarm node drained (``docker node update --availability drain``) or a cordoned one is
    ready but takes no new pods: kubectl's ``Ready,SchedulingDisabled``, ``schedulable: false``."""
    import yaml

    from kalena_web.control.models import NodeCondition
    from kalena_web.inventory.models import Node

    for node in Node.objects.filter(cluster=live):
        NodeCondition.objects.update_or_create(node=node, defaults={"schedulable": node.name != "thinkcentre-beta"})
    for output in ("", "wide"):
        status, out, _ = kalena(capsys, "get", "nodes", "home", *(["-o", output] if output else []))
        rows = {line.split()[0]: line.split()[1] for line in out.splitlines()[1:]}
        assert status == 0 and rows["thinkcentre-beta"] == "Ready,SchedulingDisabled" and rows["thinkcentre-alpha"] == "Ready"
    nodes = {n["name"]: n for n in json.loads(kalena(capsys, "get", "nodes", "home", "-o", "json")[1])}
    assert nodes["thinkcentre-beta"]["ready"] is True and nodes["thinkcentre-beta"]["schedulable"] is False
    assert nodes["thinkcentre-alpha"]["schedulable"] is True
    assert yaml.safe_load(kalena(capsys, "get", "nodes", "home", "-o", "yaml")[1])[1]["schedulable"] is False
