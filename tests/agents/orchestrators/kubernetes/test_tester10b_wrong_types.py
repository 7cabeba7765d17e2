"""Tester 10b: wrongly typed fields the D4 fix (``NODE_SHAPE``/``POD_SHAPE``) does not cover, read
by ``objects.node_event`` / ``objects.pod_events`` with ``str(...)``, ``bool`` or truthiness, so
they change what Kalena holds instead of being counted and skipped (issue 10, "Bad input": "A
malformed object … is counted and logged with its name and field … and changes nothing")."""

from __future__ import annotations

import pytest

from agents.orchestrators.kubernetes.objects import MalformedObject, node_event, pod_events
from agents.orchestrators.kubernetes.testserver import node, pod


@pytest.mark.parametrize("taint", [
    {"key": 7, "effect": "NoSchedule"},
    {"key": "dedicated", "value": ["gpu"], "effect": "NoSchedule"},
    {"key": "dedicated", "value": "gpu", "effect": ["NoSchedule"]},
], ids=["key-int", "value-list", "effect-list"])
def test_a_wrongly_typed_taint_is_malformed_not_a_new_taint(taint) -> None:
    """Observed: ``node_event`` stringifies the taint's fields (``"7"``, ``"['gpu']"``,
    ``"['NoSchedule']"``): the node gets a taint no pod tolerates, so it takes no batch pod —
    a wrongly typed field cordoned it in effect (as ``unschedulable: "false"`` did, D4).
    Expected: ``MalformedObject`` naming ``spec.taints[0].…``."""
    n = node("n1", taints=[taint])
    with pytest.raises(MalformedObject) as info:
        seen = node_event(n)
        pytest.fail(f"accepted: taints={seen.taints}")
    assert "spec.taints[0]" in str(info.value)


@pytest.mark.parametrize("toleration", [
    {"key": "dedicated", "operator": "Equal", "value": ["gpu"], "effect": "NoSchedule"},
    {"key": ["dedicated"], "operator": "Exists"},
], ids=["value-list", "key-list"])
def test_a_wrongly_typed_toleration_is_malformed(toleration) -> None:
    """Observed: ``pod_constraints`` stringifies it (``"['gpu']"``) and the pod is queued with a
    toleration that matches nothing. Expected: ``MalformedObject`` naming ``spec.tolerations[0]``."""
    p = pod("batch", "t", tier="batch")
    p["spec"]["tolerations"] = [toleration]
    with pytest.raises(MalformedObject) as info:
        events = pod_events("ADDED", p)
        pytest.fail(f"accepted: {events[0].constraints.get('tolerations')}")
    assert "spec.tolerations[0]" in str(info.value)


def test_a_string_controller_flag_does_not_choose_the_owner_cooldowns_key_on() -> None:
    """``ownerReferences[].controller: "false"`` (a string) is truthy: ``owner_of`` takes that
    reference as the controller, so the pod's owner — which cooldowns and pairing blacklists key
    on — changes. Expected: malformed (``controller`` is a boolean), or the real controller."""
    p = pod("batch", "o", tier="batch", owner_kind="Job", owner_name="train")
    p["metadata"]["ownerReferences"] = [
        {"apiVersion": "v1", "kind": "ConfigMap", "name": "cm", "controller": "false"},
        {"apiVersion": "batch/v1", "kind": "Job", "name": "train", "controller": True},
    ]
    try:
        events = pod_events("ADDED", p)
    except MalformedObject as exc:
        assert "ownerReferences" in str(exc)
        return
    assert events[0].owner == "Job/train"
