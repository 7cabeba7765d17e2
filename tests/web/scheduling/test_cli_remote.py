"""``kalena batch … --server URL`` and ``kalena get nodes --server``: the command line as a thin
client of a running console's REST API, run as an operator runs it — a fresh ``kalena`` process
against a live server — printing what the database path prints, with the same exit statuses,
and without loading Django or numpy."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from django.contrib.auth.models import Group, Permission, User

from kalena_web.api.services import api_token_create
from kalena_web.cli import main
from kalena_web.scheduling.models import BatchPod

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def console(live_server, live):
    user = User.objects.create_user("op", password="x" * 12)
    # the role comes from a data migration, which a transactional flush empties: make sure it is there
    group, _ = Group.objects.get_or_create(name="operator")
    group.permissions.add(Permission.objects.get(content_type__app_label="scheduling", codename="operate_batch"))
    user.groups.add(group)
    token, _ = api_token_create(user=user, name="cli")
    return live_server.url, token


def kalena_process(console, *argv: str, server: str | None = None) -> subprocess.CompletedProcess:
    url, token = console
    env = {**os.environ, "KALENA_SERVER": server or url, "KALENA_TOKEN": token}
    code = ("import sys; from kalena_web.cli import main; rc = main(sys.argv[1:]); "
            "heavy = sorted(m for m in ('django', 'numpy', 'celery', 'pydantic') if m in sys.modules); "
            "print('LOADED:' + ','.join(heavy), file=sys.stderr); sys.exit(rc)")
    return subprocess.run([sys.executable, "-c", code, *argv], env=env, capture_output=True, text=True, check=False)


def test_thin_client_prints_what_the_database_path_prints_and_loads_no_django(console, capsys) -> None:
    submitted = kalena_process(console, "batch", "submit", "home", "batch/remote-0", "--request", "cpu=250m,ram=512Mi",
                               "--priority", "4", "--owner", "etl", "-o", "json")
    assert submitted.returncode == 0, submitted.stderr
    assert json.loads(submitted.stdout)["name"] == "batch/remote-0"
    assert "LOADED:\n" in submitted.stderr or submitted.stderr.strip().endswith("LOADED:")
    assert BatchPod.objects.filter(workload__name="batch/remote-0").exists()  # stored (a pass may have bound it)

    remote = kalena_process(console, "batch", "get", "home", "-o", "wide")
    assert remote.returncode == 0 and remote.stderr.strip() == "LOADED:"  # no Django, numpy, Celery, pydantic
    assert main(["batch", "get", "home", "-o", "wide"]) == 0  # the database path, in this process
    local = capsys.readouterr().out
    header = remote.stdout.splitlines()[0].split()
    assert header == local.splitlines()[0].split()[:len(header)]  # same columns (the database path adds OUTCOME)
    row = remote.stdout.splitlines()[1].split()
    assert row[:6] == local.splitlines()[1].split()[:6]
    assert row[0] == "batch/remote-0" and row[3:6] == ["4", "0.25", "0.5Gi"]

    nodes = kalena_process(console, "get", "nodes", "home", "-o", "json")
    assert main(["get", "nodes", "home", "-o", "json"]) == 0
    local_nodes = {n["name"]: n for n in json.loads(capsys.readouterr().out)}
    for n in json.loads(nodes.stdout):
        assert n["slack"]["cpu"] == pytest.approx(local_nodes[n["name"]]["slack"]["cpu"], abs=1e-3)
    # a drained (or cordoned) node reads as on the database path
    from kalena_web.control.models import NodeCondition
    from kalena_web.inventory.models import Node

    beta = Node.objects.get(cluster__name="home", name="thinkcentre-beta")
    NodeCondition.objects.update_or_create(node=beta, defaults={"schedulable": False})
    drained = {n["name"]: n for n in json.loads(kalena_process(console, "get", "nodes", "home", "-o", "json").stdout)}
    assert drained["thinkcentre-beta"]["schedulable"] is False and drained["thinkcentre-alpha"]["schedulable"] is True
    table = kalena_process(console, "get", "nodes", "home").stdout
    assert any(line.split()[:2] == ["thinkcentre-beta", "Ready,SchedulingDisabled"] for line in table.splitlines())

    described = kalena_process(console, "batch", "describe", "home", "batch/remote-0")
    assert described.returncode == 0 and "Priority:  4" in described.stdout and "Owner:     etl" in described.stdout

    deleted = kalena_process(console, "batch", "delete", "home", "batch/remote-0", "-o", "json")
    assert deleted.returncode == 0 and json.loads(deleted.stdout)["state"] == "deleted"


def test_thin_client_exit_statuses_name_what_was_wrong(console) -> None:
    missing = kalena_process(console, "batch", "get", "home", "batch/none")
    assert missing.returncode == 1 and "batch/none" in missing.stderr
    assert kalena_process(console, "batch", "get", "nowhere").returncode == 1
    refused = kalena_process(console, "batch", "submit", "home", "batch/a", "--request", "cpu=1", "--priority", "-1")
    assert refused.returncode == 2 and "priority" in refused.stderr
    assert not BatchPod.objects.exists()  # nothing changed
    unreachable = kalena_process(console, "batch", "get", "home", server="http://127.0.0.1:9")
    assert unreachable.returncode == 3 and "http://127.0.0.1:9" in unreachable.stderr
    url, _ = console
    no_token = subprocess.run([sys.executable, "-m", "kalena_web.cli", "batch", "get", "home", "--server", url],
                              env={k: v for k, v in os.environ.items() if k != "KALENA_TOKEN"},
                              capture_output=True, text=True, check=False)
    assert no_token.returncode == 2 and "--token" in no_token.stderr and "api-token create" in no_token.stderr
