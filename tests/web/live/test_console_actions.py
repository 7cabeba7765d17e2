"""Console actions (issue 16): submit, complete and delete batch pods, create and revoke agent
and API tokens from the pages — operator role only, through the services the REST API uses —
and the live batch list with node and times, searchable, filterable and paged."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import Group, User

from kalena_web.api.models import ApiToken
from kalena_web.ledger.models import LiveNodeLedger
from kalena_web.scheduling.models import BatchPod
from kalena_web.telemetry.models import AgentToken


@pytest.fixture
def operator_client(client, live):
    user = User.objects.create_user("op", password="x" * 12)
    user.groups.add(Group.objects.get(name="operator"))
    client.force_login(user)
    return client


@pytest.fixture
def viewer_client(client, live):
    client.force_login(User.objects.create_user("viewer", password="x" * 12))
    return client


def submit(client, name: str, **fields):
    return client.post("/live/home/actions/batch/submit", {"name": name, "request_cpu": "0.25",
                                                           "request_ram": "1Gi", **fields})


def test_submit_complete_from_the_console_frees_the_ledger(operator_client, django_capture_on_commit_callbacks) -> None:
    with django_capture_on_commit_callbacks(execute=True):
        response = submit(operator_client, "batch/ui-0", owner="ui", priority="3")
    assert response.status_code == 302 and response["Location"] == "/live/home/batch/batch/ui-0/"
    pod = BatchPod.objects.select_related("workload__node").get(workload__name="batch/ui-0")
    assert pod.state == BatchPod.BOUND and pod.workload.priority == 3 and pod.workload.owner == "ui"
    page = operator_client.get("/live/home/batch/batch/ui-0/").content.decode()
    assert "batch/ui-0 queued" in page and ">Complete</button>" in page and ">Delete</button>" in page
    node = pod.workload.node
    done = operator_client.post("/live/home/actions/batch/complete/batch/ui-0", follow=True).content.decode()
    assert "batch/ui-0 completed" in done and ">Complete</button>" not in done
    assert BatchPod.objects.get(id=pod.id).state == BatchPod.COMPLETED
    assert LiveNodeLedger.objects.get(node=node).batch_request[1] == pytest.approx(0.0)
    listed = operator_client.get("/live/home/batch/?state=completed").content.decode()
    assert 'data-pod="batch/ui-0" data-state="completed"' in listed and node.name in listed


def test_a_form_sent_twice_shows_the_pod_once_and_another_spec_names_the_fields(operator_client) -> None:
    assert submit(operator_client, "batch/twice-0")["Location"] == "/live/home/batch/batch/twice-0/"
    again = submit(operator_client, "batch/twice-0")  # a double click, a reload after a lost answer
    assert again["Location"] == "/live/home/batch/batch/twice-0/"
    assert "already submitted with this spec" in operator_client.get(again["Location"]).content.decode()
    other = submit(operator_client, "batch/twice-0", priority="7")
    assert other.status_code == 400
    text = other.content.decode()
    assert "batch/twice-0 was not queued" in text and "another priority" in text
    assert BatchPod.objects.filter(workload__name="batch/twice-0").count() == 1


def test_a_refused_submission_names_the_field_and_stores_nothing(operator_client) -> None:
    page = submit(operator_client, "batch/dec-0", request_ram="16G")  # a decimal suffix on ram: 7 % off GiB
    assert page.status_code == 400
    text = page.content.decode()
    assert "batch/dec-0 was not queued" in text and "request" in text and "GiB" in text
    text = submit(operator_client, "Not A Name").content.decode()
    assert "Not A Name was not queued" in text and "is not namespace/pod" in text
    assert not BatchPod.objects.exists()


def test_delete_a_pending_pod_and_a_completed_one_is_refused(operator_client) -> None:
    submit(operator_client, "batch/del-0", request_cpu="0.1", request_ram="")  # no pass ran: still pending
    assert BatchPod.objects.get(workload__name="batch/del-0").state == BatchPod.PENDING
    page = operator_client.post("/live/home/actions/batch/delete/batch/del-0", follow=True).content.decode()
    assert "batch/del-0 deleted" in page
    again = operator_client.post("/live/home/actions/batch/delete/batch/del-0", follow=True).content.decode()
    assert "not deleted" in again and "already deleted" in again
    assert operator_client.post("/live/home/actions/batch/delete/batch/nope-0").status_code == 404


def test_viewers_see_no_action_and_are_refused(viewer_client) -> None:
    page = viewer_client.get("/live/home/batch/").content.decode()
    assert "Submit a batch pod" not in page
    refused = submit(viewer_client, "batch/v-0")
    assert refused.status_code == 403 and "operator role" in refused.content.decode()
    assert viewer_client.post("/live/home/actions/agent-token/create", {"node": "thinkcentre-alpha"}).status_code == 403
    assert viewer_client.post("/tokens/create", {"name": "ci"}).status_code == 403
    assert viewer_client.get("/live/home/actions/batch/submit").status_code == 405
    assert not BatchPod.objects.exists() and not AgentToken.objects.exists() and not ApiToken.objects.exists()


def test_agent_token_created_once_shown_and_revoked(operator_client) -> None:
    page = operator_client.post("/live/home/actions/agent-token/create", {"node": "thinkcentre-beta"}).content.decode()
    row = AgentToken.objects.get(node__name="thinkcentre-beta")
    assert "shown this once" in page and row.prefix in page
    agents = operator_client.get("/live/home/agents/").content.decode()
    assert f'data-token="{row.id}"' in agents and ">Revoke</button>" in agents
    done = operator_client.post("/live/home/actions/agent-token/revoke", {"id": row.id}, follow=True).content.decode()
    assert f"agent token {row.id} of thinkcentre-beta revoked" in done
    assert AgentToken.objects.get(id=row.id).revoked_at is not None
    again = operator_client.post("/live/home/actions/agent-token/revoke", {"id": row.id}, follow=True).content.decode()
    assert "not revoked" in again
    assert operator_client.post("/live/home/actions/agent-token/create", {"node": "nope"}).status_code == 404


def test_api_token_created_works_and_revoked_is_refused(operator_client, client) -> None:
    page = operator_client.post("/tokens/create", {"name": "ci", "scopes": ["write"]}).content.decode()
    row = ApiToken.objects.get(name="ci")
    assert row.scopes == "read write"
    plaintext = page.split('id="token-plaintext">')[1].split("<")[0]
    assert plaintext.startswith("kal_")
    from django.test import Client

    bearer = Client(HTTP_AUTHORIZATION=f"Bearer {plaintext}")
    assert bearer.get("/api/clusters").status_code == 200
    listed = operator_client.get("/tokens/").content.decode()
    assert f'data-token="{row.id}"' in listed and "active" in listed
    operator_client.post("/tokens/revoke", {"id": row.id})
    assert bearer.get("/api/clusters").status_code == 401
    other = User.objects.create_user("other", password="x" * 12)
    foreign = ApiToken.objects.create(user=other, name="theirs", prefix="kal_x", digest="0" * 64)
    assert operator_client.post("/tokens/revoke", {"id": foreign.id}).status_code == 404  # only one's own
    assert ApiToken.objects.get(id=foreign.id).revoked_at is None


def test_the_batch_list_searches_filters_sorts_and_pages(operator_client, live) -> None:
    from kalena_web.scheduling.services import batch_submit

    for i in range(60):
        batch_submit(cluster=live, name=f"batch/{'etl' if i % 2 else 'train'}-{i}", owner="o",
                     request={"cpu": 100.0}, priority=i, now_s=1000.0 + i)
    first = operator_client.get("/live/home/batch/").content.decode()
    assert first.count("data-pod=") == 50 and "page 1 of 2" in first and "page=2" in first
    second = operator_client.get("/live/home/batch/?page=2").content.decode()
    assert second.count("data-pod=") == 10
    found = operator_client.get("/live/home/batch/?q=train&sort=-priority").content.decode()
    names = [chunk.split('"')[0] for chunk in found.split('data-pod="')[1:]]
    assert len(names) == 30 and all("train" in n for n in names) and names[0] == "batch/train-58"
    assert operator_client.get("/live/home/batch/?state=bound").content.decode().count("data-pod=") == 0
    for bad in ("state=running", "sort=size", "page=x", "q=" + "x" * 201):
        assert operator_client.get(f"/live/home/batch/?{bad}").status_code == 400, bad
    assert operator_client.get("/live/home/batch/?page=9").status_code == 404


def test_the_submit_form_takes_millicores_as_the_rest_api_does(operator_client, django_capture_on_commit_callbacks) -> None:
    """The form says it is the same path as ``POST /api/…/batch``, whose ``cpu`` takes ``300m``
    (tester16: the form answered "'250m' is not a number")."""
    with django_capture_on_commit_callbacks(execute=True):
        response = submit(operator_client, "batch/milli-0", request_cpu="250m")
        submit(operator_client, "batch/cores-0", request_cpu="0.25")
    assert response["Location"] == "/live/home/batch/batch/milli-0/"
    milli, cores = (BatchPod.objects.select_related("workload").get(workload__name=n).workload.request[0]
                    for n in ("batch/milli-0", "batch/cores-0"))
    assert milli == pytest.approx(cores) and cores > 0
    text = submit(operator_client, "batch/milli-1", request_cpu="abc").content.decode()
    assert "batch/milli-1 was not queued" in text and 'id="error-request_cpu"' in text


def test_a_refused_form_shows_every_error_keeps_what_was_typed_and_no_input_prefix(operator_client) -> None:
    response = submit(operator_client, "Bad Name", request_cpu="lots", request_ram="16 apples", priority="high",
                      owner="me")
    assert response.status_code == 400
    text = response.content.decode()
    for field in ("name", "request_cpu", "request_ram", "priority"):  # four errors, each under its field
        assert f'id="error-{field}"' in text, field
    assert "4 problems below" in text and "&lt;input&gt;" not in text and "<input>:" not in text
    for field, typed in (("name", "Bad Name"), ("request_cpu", "lots"), ("request_ram", "16 apples"),
                         ("priority", "high"), ("owner", "me")):
        assert f'name="{field}"' in text and f'value="{typed}"' in text, field
    assert not BatchPod.objects.exists()
