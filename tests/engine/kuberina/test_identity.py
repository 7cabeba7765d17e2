"""Production identity (docs/design.md §15): live pods, read from pod JSON shaped as real controllers
make it, map to blueprint entries by owner and replica — never twice, never by a guess."""

from __future__ import annotations

import random

import numpy as np
import pytest

from agents.orchestrators.events import ProductionSeen
from agents.orchestrators.kubernetes.objects import pod_events
from agents.orchestrators.kubernetes.testpods import bare_pod, daemonset_pod, deployment_pod, job_pod, statefulset_pod
from kalena_engine.kuberina.identity import (
    BLUEPRINT_POD_LABEL, DAEMONSET, EXTRA, MAPPED, MOVED, BlueprintEntries, ExtraReason, LivePod,
    candidate_declarations, daemonset_extra, interchangeable_declarations, production_identity, renumbered_replicas,
)

T0 = 1_764_000_000.0

#: shop/web 3 replicas (n1, n2, n1), shop/db 2 (n1, n2), shop/cache 1 (n2)
ENTRIES = BlueprintEntries.of([
    ("shop/cache-0", "shop", "cache", None, "n2"),
    ("shop/db-0000", "shop", "db", None, "n1"),
    ("shop/db-0001", "shop", "db", None, "n2"),
    ("shop/web-0000", "shop", "web", None, "n1"),
    ("shop/web-0001", "shop", "web", None, "n2"),
    ("shop/web-0002", "shop", "web", None, "n1"),
])


def live(pod_json: dict) -> LivePod:
    """Pod JSON → the watch's event → the engine's live pod (the path the control plane takes)."""
    (event,) = pod_events("ADDED", pod_json)
    assert isinstance(event, ProductionSeen)
    return LivePod(event.ref, event.node, owner=event.owner, labels=event.labels, start_s=event.start_s,
                   owner_error=event.owner_error)


def one(pod_json: dict, held: dict | None = None):
    (identity,) = production_identity([live(pod_json)], ENTRIES, held=held)
    return identity


def malformed_owner() -> dict:
    pod = deployment_pod("shop", "web", "7d9c5b6f4", "x2k9q", "n1")
    pod["metadata"]["ownerReferences"] = [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "controller": True}]
    return pod


def two_controllers() -> dict:
    pod = deployment_pod("shop", "web", "7d9c5b6f4", "x2k9q", "n1")
    pod["metadata"]["ownerReferences"].append({**pod["metadata"]["ownerReferences"][0], "name": "web-5f6b8c9d7"})
    return pod


def handmade_replicaset() -> dict:
    pod = deployment_pod("shop", "web", "7d9c5b6f4", "x2k9q", "n2")
    del pod["metadata"]["labels"]["pod-template-hash"]
    pod["metadata"]["ownerReferences"][0]["name"] = "web"
    return pod


@pytest.mark.parametrize("pod_json, outcome, entry, reason", [
    # Deployment web → ReplicaSet web-7d9c5b6f4 (hash 7d9c5b6f4 stripped) → the one web replica on n2
    pytest.param(deployment_pod("shop", "web", "7d9c5b6f4", "x2k9q", "n2"), MAPPED, "shop/web-0001", "",
                 id="deployment-on-its-node"),
    # two web replicas on n1 (0000, 0002): the lowest free index
    pytest.param(deployment_pod("shop", "web", "7d9c5b6f4", "x2k9q", "n1"), MAPPED, "shop/web-0000", "",
                 id="deployment-lowest-free-replica-on-the-node"),
    # no web replica on n3: the lowest free one elsewhere, moved (a fidelity finding)
    pytest.param(deployment_pod("shop", "web", "7d9c5b6f4", "x2k9q", "n3"), MOVED, "shop/web-0000", "",
                 id="deployment-moved"),
    pytest.param(handmade_replicaset(), MAPPED, "shop/web-0001", "", id="replicaset-without-hash-is-its-own-name"),
    # StatefulSet ordinal 1 → replica 1 → db-0001, wherever it runs
    pytest.param(statefulset_pod("shop", "db", 1, "n2"), MAPPED, "shop/db-0001", "", id="statefulset-ordinal"),
    pytest.param(statefulset_pod("shop", "db", 1, "n1"), MOVED, "shop/db-0001", "", id="statefulset-moved"),
    pytest.param(statefulset_pod("shop", "cache", 0, "n2"), MAPPED, "shop/cache-0", "", id="statefulset-one-replica"),
    pytest.param(statefulset_pod("shop", "db", 2, "n2"), EXTRA, "",
                 "StatefulSet ordinal 2: declaration db has 2 replicas", id="statefulset-beyond-replicas"),
    pytest.param(job_pod("shop", "report", "28h4k", "n1"), EXTRA, "",
                 "owned by Job/report, a kind the blueprint does not declare (Deployment, ReplicaSet, StatefulSet)",
                 id="job"),
    pytest.param(bare_pod("shop", "debug", "n1"), EXTRA, "",
                 "a bare pod (no controller) whose name is no blueprint pod", id="bare-pod"),
    pytest.param(bare_pod("shop", "web-0002", "n1"), MAPPED, "shop/web-0002", "", id="bare-pod-named-as-the-ir"),
    pytest.param(deployment_pod("shop", "api", "6c4d5b7f8", "k2j4h", "n1"), EXTRA, "",
                 "no blueprint declaration api in namespace shop", id="deployment-unknown"),
    pytest.param(deployment_pod("other", "web", "7d9c5b6f4", "x2k9q", "n1"), EXTRA, "",
                 "no blueprint declaration web in namespace other", id="deployment-other-namespace"),
    pytest.param(deployment_pod("shop", "web", "7d9c5b6f4", "x2k9q", "n1",
                                labels={BLUEPRINT_POD_LABEL: "shop/web-0002"}),
                 MAPPED, "shop/web-0002", "", id="forge-label"),
    pytest.param(bare_pod("shop", "x", "n1", labels={BLUEPRINT_POD_LABEL: "shop/web-0009"}), EXTRA, "",
                 "label kalena.naughtian.io/blueprint-pod names shop/web-0009, which is no blueprint pod",
                 id="forge-label-unknown"),
    pytest.param(malformed_owner(), EXTRA, "", "its ownerReferences cannot be read: metadata.ownerReferences[0]: "
                 "a controller reference needs a kind and a name", id="owner-reference-without-a-name"),
    pytest.param(two_controllers(), EXTRA, "", "its ownerReferences cannot be read: metadata.ownerReferences: "
                 "2 controller references (Kubernetes allows one)", id="two-controllers"),
])
def test_one_pod_maps_by_owner_and_replica(pod_json, outcome, entry, reason) -> None:
    got = one(pod_json)
    assert (got.outcome, got.entry) == (outcome, entry)
    assert (got.reason.text() if got.reason else "") == reason


def test_a_daemonset_pod_maps_to_no_entry_and_is_extra_when_phase0_does_not_know_it() -> None:
    """The watch reports a DaemonSet's pod with its DaemonSet owner; the engine recognises it and
    maps it to no entry (Phase 0 took a known DaemonSet out of the node's capacity, docs/design.md §3);
    one Phase 0 does not know becomes an explained extra."""
    pod_json = daemonset_pod("kube-system", "fluentd", "8x2kq", "n1")
    (seen,) = pod_events("ADDED", pod_json)
    assert (seen.ref, seen.node, seen.owner) == ("kube-system/fluentd-8x2kq", "n1", "DaemonSet/fluentd")
    meta = pod_json["metadata"]
    pod = LivePod(f"{meta['namespace']}/{meta['name']}", "n1", owner=seen.owner, labels=meta["labels"])
    (got,) = production_identity([pod], ENTRIES)
    assert (got.outcome, got.entry, got.reason, got.declaration) == (DAEMONSET, "", None, "kube-system/fluentd")
    extra = daemonset_extra(got)
    assert (extra.outcome, extra.entry, extra.declaration) == (EXTRA, "", "")
    assert extra.reason.text() == "DaemonSet kube-system/fluentd is not in the infrastructure's Phase 0"
    with pytest.raises(ValueError, match="not a daemonset identity"):
        daemonset_extra(extra)


def test_a_pod_whose_entry_is_held_by_another_is_extra_and_says_by_whom() -> None:
    got = one(statefulset_pod("shop", "db", 1, "n2"), held={"shop/db-0001": "shop/db-1-old"})
    assert got.outcome == EXTRA and got.reason.text() == "blueprint pod shop/db-0001 is held by shop/db-1-old"


def test_the_worked_example_of_the_docstring() -> None:
    entries = BlueprintEntries.of([
        ("shop/web-0000", "shop", "web", None, "n1"), ("shop/web-0001", "shop", "web", None, "n2"),
        ("shop/db-0000", "shop", "db", None, "n1"), ("shop/db-0001", "shop", "db", None, "n2")])
    pods = [live(statefulset_pod("shop", "db", 1, "n2", started_s=T0)),
            live(deployment_pod("shop", "web", "7d9c5b6f4", "x2k9q", "n2", started_s=T0)),
            live(deployment_pod("shop", "web", "7d9c5b6f4", "p8r2t", "n3", started_s=T0)),
            live(deployment_pod("shop", "web", "5f6b8c9d7", "aaaaa", "n1", started_s=T0 + 800)),
            live(job_pod("shop", "report", "28h4k", "n1"))]
    got = production_identity(pods, entries)
    assert [(g.outcome, g.entry) for g in got] == [
        (MAPPED, "shop/db-0001"), (MAPPED, "shop/web-0001"), (MOVED, "shop/web-0000"), (EXTRA, ""), (EXTRA, "")]
    assert got[3].reason == ExtraReason("all_claimed", namespace="shop", declaration="web", replicas=2)
    assert got[3].reason.text() == "declaration web has 2 replicas, all claimed"
    assert got[3].declaration == "shop/web"


def test_a_rollout_surge_is_extra_once_then_inherits_the_entry_of_the_pod_it_replaces() -> None:
    """Old ReplicaSet web-7d9c5b6f4 holds the three replicas; the new ReplicaSet web-5f6b8c9d7
    surges one pod on n1: extra (counted once). The old pod on n1 holding web-0000 goes: the new
    pod inherits web-0000, where the blueprint put it — nothing moves, nothing is charged twice."""
    old = [live(deployment_pod("shop", "web", "7d9c5b6f4", s, n, started_s=T0))
           for s, n in (("aaaaa", "n1"), ("bbbbb", "n2"), ("ccccc", "n1"))]
    first = production_identity(old, ENTRIES)
    held = {g.entry: g.ref for g in first}
    assert sorted(held) == ["shop/web-0000", "shop/web-0001", "shop/web-0002"]
    new = live(deployment_pod("shop", "web", "5f6b8c9d7", "zzzzz", "n1", started_s=T0 + 3600))
    surge = production_identity([*old, new], ENTRIES, held=held)
    assert [g.entry for g in surge[:3]] == [first[0].entry, first[1].entry, first[2].entry]  # claims stay
    assert surge[3].outcome == EXTRA and surge[3].reason.code == "all_claimed"
    gone = old[0].ref
    released = {e: r for e, r in held.items() if r != gone}
    after = production_identity([*old[1:], new], ENTRIES, held=released)
    assert (after[2].outcome, after[2].entry) == (MAPPED, first[0].entry)


def test_held_claims_are_stable_and_the_answer_is_deterministic() -> None:
    pods = [live(deployment_pod("shop", "web", "7d9c5b6f4", f"p{i:04d}", n, started_s=T0 + i))
            for i, n in enumerate(["n1", "n1", "n2", "n3", "n2"])]
    pods += [live(statefulset_pod("shop", "db", i, "n2")) for i in range(3)]
    first = production_identity(pods, ENTRIES)
    shuffled = pods[:]
    random.Random(3).shuffle(shuffled)
    again = {g.ref: g for g in production_identity(shuffled, ENTRIES)}
    assert all(again[g.ref] == g for g in first)
    # a claim persisted is kept even when a "better" replica is free: a restart reshuffles nothing
    held = {"shop/web-0002": pods[0].ref}
    kept = production_identity(pods[:1], ENTRIES, held=held)
    assert kept[0].entry == "shop/web-0002" and kept[0].rule == "held"
    charged = [g for g in first if g.outcome in (MAPPED, MOVED)]
    assert len({g.entry for g in charged}) == len(charged)  # no entry twice
    assert [g.outcome for g in first].count(EXTRA) == 3     # 5 web pods for 3 replicas; db-2 beyond 2


def test_candidate_declarations_name_what_the_control_plane_loads() -> None:
    assert candidate_declarations(live(deployment_pod("shop", "web", "7d9c5b6f4", "x2k9q", "n1"))) == (
        "web", "web-7d9c5b6f4")
    assert candidate_declarations(live(statefulset_pod("shop", "db", 1, "n1"))) == ("db",)
    assert candidate_declarations(live(job_pod("shop", "report", "28h4k", "n1"))) == ()


def test_entries_read_the_replica_index_from_the_unrolled_name() -> None:
    entries = BlueprintEntries.of([("a/w-0003", "a", "w", None, "n"), ("a/w-0", "a", "w", None, "n"),
                                   ("a/odd", "a", "w", 7, "n")])
    assert entries.replica_index.tolist() == [3, 0, 7]
    np.testing.assert_array_equal(entries.by_declaration[("a", "w")], [1, 0, 2])


@pytest.mark.parametrize("groups, planned, seen, expected", [
    # the docstring's example: planned b, a, a; live a, a, b → 1 keeps a, 0 takes the other a, 2 takes b
    pytest.param("www", "baa", "aab", "aab", id="renumbered-between-nodes"),
    # nothing seen live: the plan as written
    pytest.param("www", "baa", "   ", "baa", id="none-seen"),
    # seen where the plan puts none of web: its replica keeps its planned node
    pytest.param("ww", "aa", "b ", "aa", id="seen-off-plan"),
    # a cycle a→c, c→a among three: each pod gets the node it runs on
    pytest.param("www", "abc", "c a", "cba", id="cycle"),
    # pods of no interchangeable group are never touched, even when seen elsewhere
    pytest.param("w  ", "bab", "aab", "bab", id="not-interchangeable"),
])
def test_renumbered_replicas_keep_live_pods_where_the_plan_puts_their_declaration(groups, planned, seen,
                                                                               expected) -> None:
    got = renumbered_replicas([g.strip() for g in groups], list(planned), [n.strip() for n in seen])
    assert "".join(got) == expected
    for group in set(groups) - {" "}:  # each group keeps its multiset of planned nodes
        rows = [i for i, g in enumerate(groups) if g == group]
        assert sorted(got[i] for i in rows) == sorted(planned[i] for i in rows)


def test_interchangeable_declarations_need_equal_replicas_named_all_or_none() -> None:
    from kalena_engine.kuberina.workloads import parse_workloads

    workloads = parse_workloads({"namespaces": {"shop": [
        {"name": "web", "replicas": 3, "requests": {"cpu": 1, "ram": "1Gi"}},
        {"name": "db", "replicas": 2, "requests": {"cpu": 2, "ram": "2Gi"}},
        {"name": "cache", "replicas": 1, "requests": {"cpu": 1, "ram": "1Gi"}},
        {"name": "api", "replicas": 2, "requests": {"cpu": 1, "ram": "1Gi"}, "antiAffinity": ["web"]},
    ]}}, source="test")
    # web named whole by api's anti-affinity: still interchangeable; cache has one replica
    assert interchangeable_declarations(workloads.pods) == {("shop", "web"), ("shop", "db"), ("shop", "api")}
    one_named = parse_workloads({"namespaces": {"shop": [
        {"name": "web", "replicas": 3, "requests": {"cpu": 1, "ram": "1Gi"}},
        {"name": "api", "replicas": 2, "requests": {"cpu": 1, "ram": "1Gi"}, "antiAffinity": ["web-0000"]},
    ]}}, source="test")
    # api keeps away from web-0000 only: renumbering web would change what api avoids
    assert interchangeable_declarations(one_named.pods) == {("shop", "api")}
