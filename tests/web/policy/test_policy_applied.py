"""Which policy version each live part applies (docs/design.md §15): the record the policy page reads,
written cheaply enough for every pass and every extender call, and the Docker/Swarm/REST
scheduling loop deciding with (and recording) the version saved in the console."""

from __future__ import annotations

import pytest

from kalena_engine.errors import InputError
from kalena_web.policy.models import PolicyApplied
from kalena_web.policy.selectors import parts_policy_state
from kalena_web.policy.services import APPLIED_REFRESH_S, policy_applied_record
from kalena_web.scheduling.models import BatchPod

pytestmark = pytest.mark.django_db


def test_a_part_is_written_when_its_version_changes_or_its_time_is_old(live) -> None:
    record = dict(cluster_id=live.id, part="scheduler")
    assert policy_applied_record(**record, version=0, now_s=1000.0)          # first pass: a row
    assert not policy_applied_record(**record, version=0, now_s=1002.0)      # same version 2 s later: no write
    assert policy_applied_record(**record, version=1, now_s=1003.0)          # a new version: at once
    assert not policy_applied_record(**record, version=1, now_s=1003.0 + APPLIED_REFRESH_S - 1)
    assert policy_applied_record(**record, version=1, now_s=1003.0 + APPLIED_REFRESH_S)  # refreshed
    row = PolicyApplied.objects.get(cluster=live, part="scheduler")
    assert (row.version, row.applied_s) == (1, 1003.0 + APPLIED_REFRESH_S)
    assert PolicyApplied.objects.count() == 1


def test_an_unknown_part_is_refused_by_name_and_nothing_is_written(live) -> None:
    with pytest.raises(InputError, match="'schedular' is not a live part") as caught:
        policy_applied_record(cluster_id=live.id, part="schedular", version=1, now_s=1000.0)
    assert "scheduler, extender, publisher, escalation" in str(caught.value)
    assert not PolicyApplied.objects.exists()


def test_parts_behind_are_those_that_decided_with_an_older_version(live) -> None:
    policy_applied_record(cluster_id=live.id, part="scheduler", version=2, now_s=1000.0)
    policy_applied_record(cluster_id=live.id, part="extender", version=1, now_s=1000.0)
    state = {p.part: (p.version, p.behind) for p in parts_policy_state(cluster=live, current=2)}
    assert state == {"scheduler": (2, False), "extender": (1, True), "publisher": (None, False),
                     "escalation": (None, False)}


def test_the_scheduling_loop_applies_and_records_the_version_saved_in_the_console(live, client,
                                                                                  django_user_model) -> None:
    from django.contrib.auth.models import Group

    from kalena_web.scheduling.services import batch_submit
    from kalena_web.scheduling.tasks import schedule
    from tests.web.conftest import PASSWORD

    user = django_user_model.objects.create_user(username="olga", password=PASSWORD)
    user.groups.add(Group.objects.get(name="operator"))
    client.force_login(user)
    page = client.get("/policy/home/")
    fields = {f.name: f.value for section in page.context["sections"].values() for f in section}
    fields.update(namespaces="team-a: 1", carried=page.context["carried"], action="save")
    assert client.post("/policy/home/", fields).status_code == 302
    for i in range(3):
        batch_submit(cluster=live, name=f"team-a/job-{i}", owner=f"team-a/job-{i}", now_s=1000.0,
                     request={"cpu": 0.25, "ram": 0.25})
    schedule(cluster_id=live.id, now_s=1001.0)
    assert BatchPod.objects.filter(cluster=live, state=BatchPod.BOUND).count() == 1  # the cap, not 3
    assert PolicyApplied.objects.get(cluster=live, part="scheduler").version == 1
