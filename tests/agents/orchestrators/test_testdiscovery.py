"""What the test API server prints for kubectl: AGE as kube-apiserver writes it, and discovery
naming the eviction subresource kubectl drain looks for."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from agents.orchestrators.kubernetes.testdiscovery import api_group_list, api_resource_list, human_duration

NOW = datetime(2026, 1, 10, 12, 0, 0, tzinfo=timezone.utc)


@pytest.mark.parametrize(("ago", "shown"), [
    pytest.param(timedelta(seconds=42), "42s", id="under-2-min-seconds"),
    pytest.param(timedelta(seconds=119), "119s", id="119-s-still-seconds"),
    pytest.param(timedelta(minutes=3, seconds=5), "3m5s", id="under-10-min-minutes-and-seconds"),
    pytest.param(timedelta(minutes=5), "5m", id="whole-minutes-drop-the-seconds"),
    pytest.param(timedelta(minutes=95), "95m", id="under-3-h-minutes"),
    pytest.param(timedelta(hours=3, minutes=20), "3h20m", id="under-8-h-hours-and-minutes"),
    pytest.param(timedelta(hours=30), "30h", id="under-2-d-hours"),
    pytest.param(timedelta(days=2, hours=3), "2d3h", id="under-8-d-days-and-hours"),  # 51 h = 2 × 24 + 3
    pytest.param(timedelta(days=20), "20d", id="then-days"),
    pytest.param(timedelta(seconds=-30), "0s", id="future-is-0s"),
])
def test_age_is_printed_as_kube_apiserver_prints_it(ago: timedelta, shown: str) -> None:
    assert human_duration((NOW - ago).strftime("%Y-%m-%dT%H:%M:%SZ"), NOW) == shown


def test_discovery_names_the_eviction_subresource_and_both_policy_versions() -> None:
    policy = next(g for g in api_group_list()["groups"] if g["name"] == "policy")
    assert [v["version"] for v in policy["versions"]] == ["v1", "v1beta1"]
    assert policy["preferredVersion"]["groupVersion"] == "policy/v1"
    core = {r["name"]: r for r in api_resource_list("", "v1")["resources"]}
    assert (core["pods/eviction"]["kind"], core["pods/eviction"]["group"]) == ("Eviction", "policy")
    assert core["pods"]["shortNames"] == ["po"] and core["nodes"]["namespaced"] is False
    assert api_resource_list("batch", "v2") is None
