"""Tester 10: bad input the Kubernetes watcher does not yet count, name and skip as issue 10's
"Bad input" requires ("A malformed object or watch event is counted and logged with its name
and field, never crashes the watcher, and changes nothing"), and a watch connection whose
answer is not bounded by the request timeout. Against the wire-faithful test API server and the
real ``kubernetes`` client, as tests/agents/orchestrators/kubernetes/test_watcher.py."""

from __future__ import annotations

import logging
import queue
import threading

import pytest

from agents.orchestrators.events import NodeSeen, PodGone, PodPending, PodRunning, PodFinished, Resynced
from agents.orchestrators.kubernetes.testserver import TestAPIServer, node, pod
from tests.agents.orchestrators.kubernetes.test_watcher import (  # noqa: F401 - fixtures
    Watching, api, orchestrator, pod_watches, wait_for, watching,
)


def _marker(api: TestAPIServer, watching: Watching, name: str) -> None:
    """A good pod created after the bad input, seen by the watch (what came before it was read)."""
    api.create_pod(pod("batch", name, tier="batch"))
    watching.until(lambda e: isinstance(e, PodPending) and e.ref == f"batch/{name}", name)


@pytest.mark.parametrize("line", [
    b'{"type": "MODIFIED", "object": {"metadata": "batch/x"}}',
    b'{"type": "ADDED", "object": {"metadata": ["x"]}}',
    b'{"type": "DELETED", "object": {"metadata": 5}}',
], ids=["modified-metadata-str", "added-metadata-list", "deleted-metadata-int"])
def test_an_event_whose_metadata_is_not_a_mapping_is_skipped_without_a_reconnect(api, watching, line) -> None:
    """Observed: counted as malformed, then ``(obj.get("metadata") or {}).get("resourceVersion")``
    in ``KubernetesWatcher.reflect`` raises AttributeError: the stream is dropped and counted
    as a reconnect ("'str' object has no attribute 'get'; retrying in 0.5 s")."""
    wait_for(lambda: api.open_watches["pods"], "the pods watch open")
    api.inject_watch_line("pods", line)
    w = watching.watcher
    wait_for(lambda: w.malformed["pods"] or w.reconnects["pods"], "the line read")
    _marker(api, watching, "after")
    assert w.malformed["pods"] == 1
    assert w.reconnects["pods"] == 0  # the stream goes on: not a reconnect
    assert len(pod_watches(api)) == 1


def test_a_bookmark_whose_metadata_is_not_a_mapping_is_counted_and_skipped_without_a_reconnect(
        api, watching, caplog) -> None:
    """Observed: not counted in ``malformed``, and the stream is dropped and retried
    (``reconnects["pods"] == 1``): ``((obj or {}).get("metadata") or {}).get(...)`` on a str."""
    caplog.set_level(logging.WARNING, logger="agents.orchestrators.kubernetes.watch")
    wait_for(lambda: api.open_watches["pods"], "the pods watch open")
    api.inject_watch_line("pods", b'{"type": "BOOKMARK", "object": {"kind": "Pod", "metadata": "7"}}')
    w = watching.watcher
    wait_for(lambda: w.malformed["pods"] or w.reconnects["pods"], "the bookmark read")
    _marker(api, watching, "after")
    assert (w.malformed["pods"], w.reconnects["pods"]) == (1, 0)
    assert any("malformed" in r.getMessage() and "metadata" in r.getMessage() for r in caplog.records)


def test_a_list_with_one_item_whose_metadata_is_not_a_mapping_still_lists_the_others(api) -> None:
    """Observed: ``_relist`` raises AttributeError on ``meta.get("name")`` for the bad item, so
    the whole list fails and is retried (a reconnect); the good pod, already emitted as
    PodPending, is missing from the Resynced of the next list, so the reconciler drops it as
    "absent from the re-list" (and where the item stays, every list fails forever and the watch
    never starts). Expected: the bad item counted and skipped, the rest listed once."""
    good = pod("batch", "good", tier="batch")
    good["metadata"].update(resourceVersion="5", uid="u-good", creationTimestamp="2026-12-01T17:00:00Z")
    page = {"kind": "PodList", "apiVersion": "v1", "metadata": {"resourceVersion": "5"},
            "items": [good, {"apiVersion": "v1", "kind": "Pod", "metadata": "junk"}]}

    def list_once(groups: dict, body) -> tuple[int, dict]:  # the first pods list only, then the built-in routes
        api._routes.clear()
        return 200, page

    api.route("GET", r"^/api/v1/pods$", list_once)
    orch = orchestrator(api)
    stop, out = threading.Event(), queue.Queue()
    thread = threading.Thread(target=lambda: [out.put(e) for e in orch.watch(stop)], daemon=True)
    thread.start()
    seen = []
    try:
        while not any(isinstance(e, Resynced) for e in seen):
            seen.append(out.get(timeout=30))
    finally:
        stop.set()
        thread.join(timeout=10)
    assert any(isinstance(e, PodPending) and e.ref == "batch/good" for e in seen), seen
    (resynced,) = [e for e in seen if isinstance(e, Resynced)]
    assert "batch/good" in resynced.pods  # else the reconciler drops it as absent from the re-list
    w = orch.watchers[-1]
    assert (w.malformed["pods"], w.lists["pods"], w.reconnects["pods"]) == (1, 1, 0)


def test_an_unknown_phase_of_a_running_batch_pod_is_malformed_not_a_failure(api, watching) -> None:
    """Observed: ``phase: "Runnning"`` (not one of Pending, Running, Succeeded, Failed, Unknown)
    of a bound batch pod becomes ``PodFinished(outcome="failed")``: the reconciler then frees its
    ledgers and completes it. Expected: counted and skipped (the pod stays running)."""
    api.create_pod(pod("batch", "r", "n1", tier="batch"))
    watching.until(lambda e: isinstance(e, PodRunning) and e.ref == "batch/r", "r running")
    api.store.mutate("pods", "batch/r", lambda p: p["status"].update(phase="Runnning"))
    _marker(api, watching, "after")
    assert not [e for e in watching.seen if isinstance(e, PodFinished) and e.ref == "batch/r"]
    assert watching.watcher.malformed["pods"] == 1


def test_a_garbage_deletion_timestamp_does_not_remove_a_pending_pod(api, watching) -> None:
    """Observed: ``metadata.deletionTimestamp: "not-a-time"`` is never parsed (only tested for
    truth) and the queued pod becomes ``PodGone``: it leaves the queue. Expected: malformed, skipped."""
    api.create_pod(pod("batch", "q", tier="batch"))
    watching.until(lambda e: isinstance(e, PodPending) and e.ref == "batch/q", "q pending")
    api.store.mutate("pods", "batch/q", lambda p: p["metadata"].update(deletionTimestamp="not-a-time"))
    _marker(api, watching, "after")
    assert not [e for e in watching.seen if isinstance(e, PodGone) and e.ref == "batch/q"]
    assert watching.watcher.malformed["pods"] == 1


@pytest.mark.parametrize("value", ["false", "False", {"cordoned": False}], ids=["str-false", "str-False", "dict"])
def test_a_wrongly_typed_unschedulable_does_not_cordon_a_node(api, watching, value) -> None:
    """Observed: ``spec.unschedulable`` is read as ``bool(value)`` and not type-checked
    (NODE_SHAPE has no ``unschedulable``): the string "false" cordons the node
    (``NodeSeen(schedulable=False)``). Expected: counted and skipped as malformed."""
    api.store.mutate("nodes", "n1", lambda n: n["spec"].update(unschedulable=value))
    _marker(api, watching, "after")
    wait_for(lambda: watching.watcher.malformed["nodes"], "the node's change read")  # its own stream: wait for it
    seen = list(watching.events.queue) + watching.seen
    assert not [e for e in seen if isinstance(e, NodeSeen) and e.name == "n1" and not e.schedulable]
    assert watching.watcher.malformed["nodes"] == 1


@pytest.mark.parametrize("labels", [{"app": ["a", "b"]}, {"app": {"x": 1}}, {"app": 5}],
                         ids=["list", "dict", "int"])
def test_a_pod_label_value_that_is_not_a_string_is_malformed(api, watching, labels) -> None:
    """Observed: POD_SHAPE checks ``metadata.labels`` is a mapping but not that its values are
    strings; the pod is queued with ``labels={"app": ["a", "b"]}`` and every scheduling pass
    then fails (see tests/web/kubernetes/test_tester10_poison_label.py)."""
    bad = pod("batch", "bad", tier="batch")
    bad["metadata"]["labels"].update(labels)
    api.create_pod(bad)
    _marker(api, watching, "after")
    assert not [e for e in watching.seen if getattr(e, "ref", "") == "batch/bad"]
    assert watching.watcher.malformed["pods"] == 1


@pytest.mark.parametrize("selector, field", [
    ({"matchLabels": "app=x"}, "matchLabels"),
    ({"matchLabels": {"app": ["x"]}}, "matchLabels"),
    ({"matchExpressions": [{"key": "app", "operator": "In", "values": "x"}]}, "values"),
], ids=["matchLabels-str", "matchLabels-list-value", "values-str"])
def test_a_malformed_anti_affinity_label_selector_is_malformed(api, watching, caplog, selector, field) -> None:
    """Observed: POD_SHAPE stops at ``labelSelector: Mapping``; the pod is emitted as PodPending.
    ``matchLabels: "app=x"`` then raises AttributeError inside the reconciler's service call
    (counted ``failed``, logged as a traceback without the field); ``values: "x"`` is stored and
    the pod bound. Expected: counted as malformed in the watcher, logged with the field."""
    caplog.set_level(logging.WARNING, logger="agents.orchestrators.kubernetes.watch")
    bad = pod("batch", "bad", tier="batch")
    bad["spec"]["affinity"] = {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"labelSelector": selector, "topologyKey": "kubernetes.io/hostname"}]}}
    api.create_pod(bad)
    _marker(api, watching, "after")
    assert not [e for e in watching.seen if getattr(e, "ref", "") == "batch/bad"]
    (message,) = [r.getMessage() for r in caplog.records if "malformed" in r.getMessage()]
    assert "batch/bad" in message and field in message, message


@pytest.mark.parametrize("value", ["-3", "0", [2]], ids=["negative", "zero", "list"])
def test_a_min_member_that_is_not_a_positive_integer_is_malformed_and_named(api, watching, caplog, value) -> None:
    """Observed: "-3" and "0" pass (``int(raw)`` only; the message says "is not a positive
    integer" but nothing checks the sign) and "-3" later violates the database's check
    constraint in the reconciler (IntegrityError, counted ``failed``); ``[2]`` is counted but
    logged as ``bad: field unknown: TypeError: int() argument …`` — no namespace, no field."""
    caplog.set_level(logging.WARNING, logger="agents.orchestrators.kubernetes.watch")
    bad = pod("batch", "bad", tier="batch")
    bad["metadata"]["annotations"].update({"kalena.naughtian.io/gang": "g", "kalena.naughtian.io/min-member": value})
    api.create_pod(bad)
    _marker(api, watching, "after")
    assert not [e for e in watching.seen if getattr(e, "ref", "") == "batch/bad"]
    (message,) = [r.getMessage() for r in caplog.records if "malformed" in r.getMessage()]
    assert "batch/bad" in message and "metadata.annotations" in message and "min-member" in message, message


def test_a_watch_whose_answer_is_late_gives_up_at_the_request_timeout(api) -> None:
    """Observed: the watch call passes ``_request_timeout=(request_timeout_s, watch_timeout_s + 60)``,
    so the request timeout bounds only the TCP connect; an API server that accepted the connection
    but answers late is waited for up to 360 s (here the 3 s late answer is taken and its event
    yielded, with a 0.5 s request timeout). Expected: like every other call, give up at the
    request timeout (the watcher then retries with backoff)."""
    orch = orchestrator(api, timeout_s=0.5)
    _, version = orch.list_objects("pods")
    api.fault("GET", r"^/api/v1/pods$", delay_s=3.0)  # the watch's answer comes 3 s late
    api.later(3.5, lambda: api.create_pod(pod("batch", "late", tier="batch")))
    stop = threading.Event()
    try:
        first = next(iter(orch.watch_objects("pods", version, 300, stop)))
    except StopIteration:
        pytest.fail("the watch ended without an answer")
    except Exception as exc:  # noqa: BLE001 - expected: the call gave up (a timeout, any transport error)
        assert not isinstance(exc, AssertionError)
    else:
        pytest.fail(f"the watch waited for the late answer past the 0.5 s request timeout and yielded {first[0]}")
    finally:
        stop.set()


def test_a_late_unschedulable_condition_does_not_overwrite_a_pod_bound_meanwhile(api) -> None:
    """Observed: ``note_pending`` queues the ``PodScheduled=False, reason Unschedulable`` status
    patch on the event thread; when it reaches the API after the pod was bound (a backlog of
    Events, a slow API server — here the patch is answered 1 s late while the next pass binds),
    the strategic merge patch replaces the Binding's ``PodScheduled=True``: a running pod shows
    Unschedulable. Expected: a pod bound before the patch lands keeps ``PodScheduled=True``."""
    from agents.orchestrators.base import BatchSpec

    api.create_pod(pod("batch", "p", tier="batch"))
    orch = orchestrator(api, timeout_s=5.0)
    api.fault("PATCH", r"/pods/p/status$", delay_s=1.0)
    orch.note_pending("batch/p", "0/1 nodes are available: 1 Insufficient cpu slack.")
    wait_for(lambda: any(v == "PATCH" and p.endswith("/p/status") for v, p, _ in api.request_log), "the patch sent")
    orch.bind(BatchSpec(id="batch/p", request_mcpu=500, request_bytes=2**30), "n1")  # the next pass placed it
    assert orch.flush_events(10.0)
    bound = api.get("pods", "batch/p")
    assert bound["spec"]["nodeName"] == "n1"
    (condition,) = [c for c in bound["status"]["conditions"] if c["type"] == "PodScheduled"]
    assert condition["status"] == "True", condition


def test_a_watch_stopped_while_its_answer_is_late_ends_when_the_answer_comes(api) -> None:
    """Observed: ``_stop_when`` calls ``Watch.stop()`` once, as soon as ``stop`` is set; while the
    answer is late ``_resp`` does not exist yet, so nothing is shut down and it never tries
    again: the stream then waits for its next line (measured by hand: stop at 0.5 s, answer at
    4 s, the watch returned at 34.0 s, at the test server's 30 s bookmark; a real API server can
    be silent up to the 360 s read timeout). A lost lease or ``kalena watch`` shutdown leaves the
    thread and its pooled connection behind. Expected: the watch ends once it is answered."""
    orch = orchestrator(api, timeout_s=5.0)  # the fixture's server: bookmarks every 30 s
    _, version = orch.list_objects("pods")
    api.fault("GET", r"^/api/v1/pods$", delay_s=2.0)
    stop = threading.Event()
    thread = threading.Thread(target=lambda: [None for _ in orch.watch_objects("pods", version, 300, stop)],
                              daemon=True)
    thread.start()
    stop.set()  # stopped while the answer is late
    wait_for(lambda: not thread.is_alive(), "the stopped watch ended", timeout_s=15.0)
