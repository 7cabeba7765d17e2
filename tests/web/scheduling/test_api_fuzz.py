"""The batch API under malformed bodies: every field of a valid submission replaced by every
JSON value of the wrong kind (and the same inside ``request``, ``limit`` and ``constraints``).
No body may crash the server (500); a refused body stores nothing; an accepted one is a pod."""

from __future__ import annotations

import json

import pytest
from django.contrib.auth.models import Group, User
from django.test import Client

from kalena_web.scheduling.models import BatchPod

VALID = {"name": "batch/fz-0", "owner": "fz", "request": {"cpu": 1, "ram": "1Gi"}, "limit": {"cpu": 2, "ram": "2Gi"},
         "priority": 1, "labels": {"app": "fz"}, "constraints": {"node_selector": {"zone": "a"}, "tolerations": ["gpu"]},
         "image": "busybox", "command": ["true"], "gang": "", "min_member": None}
WRONG = [None, True, 0, -1, 1.5, 1e308, -1e308, "", "x" * 300, "\u0000", "1Ti", [], [1, "a"], {}, {"a": {"b": []}}]
NESTED = {"request": ["cpu", "ram", "gpu", "memory"], "limit": ["cpu", "ram"],
          "constraints": ["node_selector", "tolerations", "anti_affinity_terms", "anti_affinity", "spread"]}


def bodies():
    n = 0
    for key in VALID:
        for value in WRONG:
            n += 1
            yield f"{key}={value!r:.20}", {**VALID, "name": f"batch/fz-{n}", key: value}
    for outer, keys in NESTED.items():
        for key in keys:
            for value in WRONG:
                n += 1
                yield f"{outer}.{key}={value!r:.20}", {**VALID, "name": f"batch/fz-{n}",
                                                       outer: {**(VALID[outer] or {}), key: value}}
    for value in WRONG:  # inside a list-valued constraint
        n += 1
        yield f"spread[0]={value!r:.20}", {**VALID, "name": f"batch/fz-{n}", "constraints": {"spread": [value]}}
        n += 1
        yield f"anti_affinity_terms[0]={value!r:.20}", {**VALID, "name": f"batch/fz-{n}",
                                                        "constraints": {"anti_affinity_terms": [value]}}


def test_no_malformed_submission_crashes_the_server_or_leaves_anything(live) -> None:
    user = User.objects.create_user("op-fz", password="x" * 12)
    user.groups.add(Group.objects.get(name="operator"))
    client = Client(raise_request_exception=False)
    client.force_login(user)
    crashed = []
    for label, body in bodies():
        response = client.post("/api/clusters/home/batch", json.dumps(body), content_type="application/json")
        stored = BatchPod.objects.filter(workload__name=body["name"]).exists() if isinstance(body["name"], str) \
            and "\x00" not in body["name"] else False
        if response.status_code >= 500:
            crashed.append(label)
        elif response.status_code == 201:
            assert stored, label
        else:
            assert response.status_code in (400, 409, 422) and not stored, (label, response.status_code)
    assert crashed == []


@pytest.mark.parametrize("path", ["batch/a/complete", "batch/..", "%00", "x" * 300])
def test_odd_pod_paths_are_404_not_500(live, path) -> None:
    user = User.objects.create_user("op-p", password="x" * 12)
    user.groups.add(Group.objects.get(name="operator"))
    client = Client(raise_request_exception=False)
    client.force_login(user)
    for response in (client.get(f"/api/clusters/home/batch/{path}/why-pending"),
                     client.post(f"/api/clusters/home/batch/{path}/complete"),
                     client.delete(f"/api/clusters/home/batch/{path}")):
        assert response.status_code < 500
