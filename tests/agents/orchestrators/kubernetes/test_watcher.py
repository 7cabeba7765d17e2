"""The Kubernetes watcher and adapter against the wire-faithful test API server and the real
``kubernetes`` client: bad watch lines and malformed objects are counted, logged with their
name and field and skipped while the stream goes on; the watch resumes from a bookmark's
version; every API call gives up at the request timeout."""

from __future__ import annotations

import json
import logging
import queue
import random
import threading
import time

import pytest
from kubernetes import client as k8s

from agents.orchestrators.base import BatchSpec, OrchestratorError
from agents.orchestrators.events import PodPending, Resynced
from agents.orchestrators.kubernetes import KubernetesOrchestrator
from agents.orchestrators.kubernetes.lease import LeaderElector
from agents.orchestrators.kubernetes.testserver import TestAPIServer, node, pod

DEADLINE_S = 30.0


def wait_for(check, what: str, timeout_s: float = DEADLINE_S):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        got = check()
        if got:
            return got
        time.sleep(0.02)
    raise AssertionError(f"timed out waiting for {what}")


@pytest.fixture
def api():
    with TestAPIServer(bookmark_interval_s=30.0) as server:  # bookmarks only when a test asks
        server.create("nodes", node("n1"))
        yield server


def orchestrator(api: TestAPIServer, timeout_s: float = 5.0) -> KubernetesOrchestrator:
    return KubernetesOrchestrator(k8s.ApiClient(k8s.Configuration(host=api.url)), request_timeout_s=timeout_s)


class Watching:
    """The orchestrator's watch on a thread; ``events`` collects what it emits."""

    def __init__(self, api: TestAPIServer) -> None:
        self.orch = orchestrator(api)
        self.stop = threading.Event()
        self.events: queue.Queue = queue.Queue()
        self.seen: list = []
        stream = self.orch.watch(self.stop)
        self.thread = threading.Thread(target=lambda: [self.events.put(e) for e in stream], daemon=True)
        self.thread.start()
        self.watcher = self.orch.watchers[-1]
        self.until(lambda e: isinstance(e, Resynced), "the first list")

    def until(self, match, what: str):
        deadline = time.monotonic() + DEADLINE_S
        while time.monotonic() < deadline:
            try:
                event = self.events.get(timeout=0.05)
            except queue.Empty:
                continue
            self.seen.append(event)
            if match(event):
                return event
        raise AssertionError(f"timed out waiting for {what}")

    def close(self) -> None:
        self.stop.set()
        self.thread.join(timeout=10)


@pytest.fixture
def watching(api):
    w = Watching(api)
    yield w
    w.close()


def pod_watches(api: TestAPIServer) -> list[dict]:
    return [q for v, p, q in api.queries if v == "GET" and p == "/api/v1/pods" and q.get("watch") in ("true", "1", "True")]


BAD_LINES = [
    (b"this is not json", "<line>: not JSON"),
    (b'["ADDED"]', "a watch event is a JSON object"),
    (b'{"type": "ADDED"}', "object: expected an object, got NoneType"),
    (b'{"type": "ADDED", "object": "batch/p"}', "object: expected an object, got str"),
    (b'{"type": "RENAMED", "object": {"metadata": {"name": "q", "namespace": "batch"}}}', "batch/q: type: 'RENAMED'"),
    (b'{"type": "ERROR", "object": {"kind": "Status", "message": "no code"}}', "object.code"),
]


def test_lines_that_are_not_watch_events_are_counted_and_named_and_the_stream_goes_on(api, watching, caplog) -> None:
    caplog.set_level(logging.WARNING, logger="agents.orchestrators.kubernetes.watch")
    wait_for(lambda: api.open_watches["pods"], "the pods watch open")
    for line, _ in BAD_LINES:
        api.inject_watch_line("pods", line)
    api.inject_watch_line("pods", b"")  # a blank line is no event and no fault
    w = watching.watcher
    wait_for(lambda: w.malformed["pods"] == len(BAD_LINES), "every bad line counted")
    api.create_pod(pod("batch", "after", tier="batch"))
    watching.until(lambda e: isinstance(e, PodPending) and e.ref == "batch/after", "the pod created after the bad lines")
    assert w.malformed["pods"] == len(BAD_LINES)
    assert w.reconnects["pods"] == 0 and w.lists["pods"] == 1 and w.expired["pods"] == 0
    assert len(pod_watches(api)) == 1  # the same stream carried the pod after the bad lines
    logged = [r.getMessage() for r in caplog.records if "malformed watch line" in r.getMessage()]
    assert len(logged) == len(BAD_LINES)
    for (_, named), message in zip(BAD_LINES, logged, strict=True):
        assert named in message, message


@pytest.mark.parametrize("edit, field", [
    (lambda p: p["spec"].update(containers="not-a-list"), "spec.containers: expected a list"),
    (lambda p: p["metadata"].update(labels=["tier", "batch"]), "metadata.labels: expected a mapping"),
    (lambda p: p["spec"]["containers"][0].update(resources="lots"), "spec.containers[0].resources: expected a mapping"),
    (lambda p: p["spec"]["containers"][0]["resources"]["requests"].update(cpu="lots"), "requests.cpu"),
])
def test_a_malformed_pod_is_counted_named_and_skipped_and_the_watch_goes_on(api, watching, caplog, edit, field) -> None:
    caplog.set_level(logging.WARNING, logger="agents.orchestrators.kubernetes.watch")
    bad = pod("batch", "bad", tier="batch")
    edit(bad)
    api.create_pod(bad)
    api.create_pod(pod("batch", "good", tier="batch"))
    watching.until(lambda e: isinstance(e, PodPending) and e.ref == "batch/good", "the good pod")
    assert not any(getattr(e, "ref", "") == "batch/bad" for e in watching.seen)
    assert watching.watcher.malformed["pods"] == 1 and watching.watcher.reconnects["pods"] == 0
    (message,) = [r.getMessage() for r in caplog.records if "malformed" in r.getMessage()]
    assert "batch/bad" in message and field in message, message


def test_the_watch_resumes_from_the_version_of_the_last_bookmark(api, watching) -> None:
    wait_for(lambda: api.open_watches["pods"], "the pods watch open")
    listed = watching.watcher.versions["pods"]
    api.create("nodes", node("n2"))  # moves the cluster's version; the pods stream carries no event for it
    moved = str(api.store.rv)
    assert int(moved) > int(listed)
    # asked again until it lands: a bookmark asked for before the stream's handler started is not sent
    wait_for(lambda: api.bookmark() or watching.watcher.versions["pods"] == moved, "the bookmark's version")
    api.drop_watches()  # the stream ends: the watcher resumes from where the bookmark left it
    wait_for(lambda: len(pod_watches(api)) >= 2, "the pods watch resumed")
    assert pod_watches(api)[-1]["resourceVersion"] == moved
    assert watching.watcher.lists["pods"] == 1  # resumed, not re-listed


SLOW_S = 4.0
TIMEOUT_S = 0.5
CALLS = [
    ("GET", r"/namespaces/batch/pods/p$", lambda o: o.pod("batch/p")),
    ("GET", r"/namespaces/batch/pods/p$", lambda o: o.pod_node("batch/p")),
    ("PATCH", r"/nodes/n1/status$", lambda o: o.publish_batch_capacity("n1", cpu_mcpu=1000, memory_bytes=2**30)),
    ("POST", r"/pods/p/binding$", lambda o: o.bind(BatchSpec(id="batch/p", request_mcpu=500, request_bytes=2**30), "n1")),
    ("POST", r"/pods/p/eviction$", lambda o: o.evict("batch/p", grace_s=30, reason="test")),
    ("GET", r"/api/v1/pods$", lambda o: o.list_objects("pods")),
    ("GET", r"/leases/kalena-scheduler$", lambda o: o.lease_read("kube-system", "kalena-scheduler")),
    ("POST", r"/tokenreviews$", lambda o: o.token_review("token", ["kalena"])),
]


@pytest.mark.parametrize("method, path, call", CALLS, ids=[c[1] for c in CALLS])
def test_every_api_call_gives_up_at_the_request_timeout(api, method, path, call) -> None:
    api.create_pod(pod("batch", "p", tier="batch"))
    api.fault(method, path, delay_s=SLOW_S)  # answered, but only after SLOW_S > TIMEOUT_S
    with pytest.raises(OrchestratorError):
        call(orchestrator(api, timeout_s=TIMEOUT_S))


def test_a_lease_read_that_times_out_is_a_missed_renewal_not_the_end_of_the_elector(api) -> None:
    elector = LeaderElector(orchestrator(api, timeout_s=TIMEOUT_S), identity="a", lease_duration_s=2.0,
                            renew_deadline_s=1.5, retry_period_s=0.1)
    api.fault("GET", r"/leases/kalena-scheduler$", delay_s=SLOW_S)
    stop = threading.Event()
    thread = threading.Thread(target=elector.run, args=(stop,), daemon=True)
    thread.start()
    try:
        wait_for(elector.is_leader, "the lease acquired after the slow read")
        assert thread.is_alive()
        lease = api.get("leases", "kube-system/kalena-scheduler")
        assert lease["spec"]["holderIdentity"] == "a" and lease["spec"]["leaseTransitions"] == 0  # a new Lease
    finally:
        stop.set()
        thread.join(timeout=5)


def test_a_bookmark_ahead_of_the_server_makes_the_watcher_re_list_not_wait_forever(api, watching, caplog) -> None:
    """A version the server has not reached (a bookmark from before an API server restart, or
    from a faulty proxy) is answered "Too large resource version" (504) after the watch cache's
    wait; the watcher re-lists, as client-go's reflector does, and sees what came after."""
    caplog.set_level(logging.INFO, logger="agents.orchestrators.kubernetes.watch")
    api.too_large_wait_s = 0.2
    wait_for(lambda: api.open_watches["pods"], "the pods watch open")
    ahead = str(api.store.rv + 1000)
    api.inject_watch_line("pods", json.dumps({"type": "BOOKMARK", "object": {
        "kind": "Pod", "apiVersion": "v1", "metadata": {"resourceVersion": ahead}}}).encode())
    wait_for(lambda: watching.watcher.versions["pods"] == ahead, "the bookmark read")
    api.drop_watches()
    wait_for(lambda: watching.watcher.lists["pods"] == 2, "a re-list")
    api.create_pod(pod("batch", "after", tier="batch"))
    watching.until(lambda e: isinstance(e, PodPending) and e.ref == "batch/after", "the pod created afterwards")
    assert watching.watcher.expired["pods"] == 1
    assert any("Too large resource version" in r.getMessage() for r in caplog.records)


def test_a_late_unschedulable_patch_never_overwrites_a_binding(api, watching) -> None:
    """The PodScheduled=False patch is sent by the event thread and may reach the API after the
    pod was bound; its resourceVersion precondition makes the API refuse it (409)."""
    api.create_pod(pod("batch", "p", tier="batch"))
    watching.until(lambda e: isinstance(e, PodPending) and e.ref == "batch/p", "the pod pending")
    orch = watching.orch
    api.fault("PATCH", r"/pods/p/status$", delay_s=1.0)  # the patch arrives after the binding below
    orch.note_pending("batch/p", "0/1 nodes are available: 1 Insufficient cpu slack.")
    wait_for(lambda: any(v == "PATCH" and p.endswith("/p/status") for v, p, _ in api.request_log), "the patch sent")
    orch.bind(BatchSpec(id="batch/p", request_mcpu=500, request_bytes=2**30), "n1")
    assert orch.flush_events(10.0)
    bound = api.get("pods", "batch/p")
    assert bound["spec"]["nodeName"] == "n1"
    assert not [c for c in bound["status"].get("conditions") or [] if c.get("reason") == "Unschedulable"]
    assert ("PATCH", "/api/v1/namespaces/batch/pods/p/status", 409) in api.answers
    # a pod still pending gets the condition (the precondition holds)
    api.create_pod(pod("batch", "q", tier="batch"))
    watching.until(lambda e: isinstance(e, PodPending) and e.ref == "batch/q", "q pending")
    orch.note_pending("batch/q", "0/1 nodes are available: 1 Insufficient cpu slack.")
    assert orch.flush_events(10.0)
    (condition,) = [c for c in api.get("pods", "batch/q")["status"]["conditions"] if c["type"] == "PodScheduled"]
    assert (condition["status"], condition["reason"]) == ("False", "Unschedulable")


def test_a_server_that_ends_every_watch_at_once_is_asked_again_only_after_a_backoff(api) -> None:
    from agents.orchestrators.kubernetes.watch import KubernetesWatcher

    slept: list[float] = []
    watcher = KubernetesWatcher(orchestrator(api), sleep=lambda s, stop: (slept.append(s), stop.wait(0.01)),
                                rng=random.Random(0))
    stop = threading.Event()
    stream = watcher.events(stop)
    next(e for e in stream if isinstance(e, Resynced))
    api.route("GET", r"^/api/v1/pods$", lambda groups, body: (200, {}))  # every request: an empty 200, at once
    api.drop_watches()
    thread = threading.Thread(target=lambda: [None for _ in stream], daemon=True)
    thread.start()
    try:
        wait_for(lambda: len(slept) >= 3, "three backoffs")
    finally:
        stop.set()
        thread.join(timeout=10)
    asked = len([p for v, p, _ in api.request_log if v == "GET" and p == "/api/v1/pods"])
    assert asked <= len(slept) + 2  # the first list, the first watch, then one request per backoff: no tight loop
    assert slept[2] > slept[0]  # the delay doubles (each is jittered ×0.5–1.5: 0.5 s, 1 s, 2 s)


def test_a_fractional_lease_duration_never_lets_two_candidates_act_at_once(api) -> None:
    now = [0.0]
    a, b = (LeaderElector(orchestrator(api), identity=who, lease_duration_s=10.4, renew_deadline_s=10.2,
                          retry_period_s=2.0, clock=lambda: now[0]) for who in "ab")
    assert a.try_acquire_or_renew() and not b.try_acquire_or_renew()
    assert api.get("leases", "kube-system/kalena-scheduler")["spec"]["leaseDurationSeconds"] == 11  # rounded up
    for t in (10.1, 10.3, 10.9):  # a stopped renewing at 0 (partitioned): it acts until 10.2
        now[0] = t
        b.try_acquire_or_renew()
        assert not (a.is_leader() and b.is_leader()), t
    now[0] = 11.0
    assert b.try_acquire_or_renew() and not a.is_leader()


def test_a_repeated_failed_scheduling_is_counted_on_the_event_already_sent(api) -> None:
    """kube-scheduler's broadcaster counts repeats: the same FailedScheduling for the same pod
    raises the first Event's count (one Event object, ``kubectl describe`` shows ``x3``); a new
    message is an Event of its own, and every pod gets its own Scheduled."""
    api.create_pod(pod("batch", "p", tier="batch"))
    orch = orchestrator(api)
    why = "0/1 nodes are available: 1 Insufficient cpu slack."
    for _ in range(3):
        orch.note_pending("batch/p", why)
        assert orch.flush_events(10.0)
    orch.note_pending("batch/p", "0/1 nodes are available: 1 node not ready.")
    orch.bind(BatchSpec(id="batch/p", request_mcpu=500, request_bytes=2**30), "n1")
    assert orch.flush_events(10.0)
    events, _ = api.store.list("events")
    failed = sorted((e["message"], e["count"]) for e in events if e["reason"] == "FailedScheduling")
    assert failed == [("0/1 nodes are available: 1 Insufficient cpu slack.", 3),
                      ("0/1 nodes are available: 1 node not ready.", 1)]
    assert [e["involvedObject"]["name"] for e in events if e["reason"] == "Scheduled"] == ["p"]
    assert orch.events_aggregated == 2


def test_a_watch_with_a_pod_share_translates_only_its_pods_and_still_lists_every_one(api) -> None:
    """``watch_pods_of`` (a sharded scheduler's share, issue 32): a pod outside it gives no event
    — not when listed, added or deleted — yet its ref stays in the list's ``Resynced`` set, so a
    re-list marks nothing gone that still exists."""
    api.create_pod(pod("batch", "mine-listed", tier="batch"))
    api.create_pod(pod("batch", "theirs-listed", tier="batch"))
    orch = orchestrator(api)
    orch.watch_pods_of = lambda ref: ref.startswith("batch/mine")
    stop = threading.Event()
    events: queue.Queue = queue.Queue()
    stream = orch.watch(stop)
    thread = threading.Thread(target=lambda: [events.put(e) for e in stream], daemon=True)
    thread.start()
    seen: list = []

    def until(match, what: str):
        deadline = time.monotonic() + DEADLINE_S
        while time.monotonic() < deadline:
            try:
                event = events.get(timeout=0.05)
            except queue.Empty:
                continue
            seen.append(event)
            if match(event):
                return event
        raise AssertionError(f"timed out waiting for {what}")

    try:
        resynced = until(lambda e: isinstance(e, Resynced), "the first list")
        assert {"batch/mine-listed", "batch/theirs-listed"} <= set(resynced.pods)
        api.create_pod(pod("batch", "theirs-added", tier="batch"))
        api.create_pod(pod("batch", "mine-added", tier="batch"))
        until(lambda e: getattr(e, "ref", "") == "batch/mine-added", "the added pod of the share")
        refs = {getattr(e, "ref", "") for e in seen if isinstance(e, PodPending)}
        assert refs == {"batch/mine-listed", "batch/mine-added"}
        watcher = orch.watchers[-1]
        assert "batch/theirs-added" in watcher.pods and watcher.uids.get("batch/theirs-added")
        assert not watcher.malformed
    finally:
        stop.set()
        thread.join(timeout=10)


def test_a_pod_line_outside_the_share_is_decoded_up_to_its_metadata_only() -> None:
    """Issue 32: the watch of a sharded scheduler reads another shard's pod line only as far as
    its metadata (ref, uid, resourceVersion: what it keeps of that pod) — the rest of the line
    is never decoded, so a line broken after its metadata is no malformed event there — while a
    pod of its share, and a line whose object does not open with its metadata, are decoded
    whole as before."""
    from agents.orchestrators.kubernetes.client import _Watch

    meta = {"name": "theirs", "namespace": "batch", "uid": "u-1", "resourceVersion": "7"}
    head = '{"type":"MODIFIED","object":{"kind":"Pod","apiVersion":"v1","metadata":' + json.dumps(meta)
    broken = head + ',"spec":{"containers":[{"name":'  # cut after the metadata
    w = _Watch(wants=lambda ref: ref.startswith("batch/mine"))
    event = w.unmarshal_event(broken, None)
    assert event["type"] == "MODIFIED" and event["raw_object"] == {"metadata": meta}
    mine = broken.replace('"theirs"', '"mine"')
    assert w.unmarshal_event(mine, None)["type"] == "MALFORMED"  # of the share: decoded whole
    spec_first = '{"type":"MODIFIED","object":{"spec":{},"metadata":' + json.dumps(meta) + ',"spec":'
    assert w.unmarshal_event(spec_first, None)["type"] == "MALFORMED"  # another head: decoded whole
    whole = head + ',"spec":{},"status":{"phase":"Pending"}}}'
    assert w.unmarshal_event(whole, None)["raw_object"] == {"metadata": meta}
    assert _Watch().unmarshal_event(whole, None)["raw_object"]["status"] == {"phase": "Pending"}


def test_watch_lines_reach_the_client_one_per_segment_whatever_the_chunks() -> None:
    """The client's line splitter copies its buffer's rest after every line, so a server chunk
    of n events would cost n² bytes: the response a watch reads hands it one whole line per
    segment — the same lines, in order, a chunk of 300 events or a line cut across chunks."""
    from kubernetes.watch.watch import iter_resp_lines

    from agents.orchestrators.kubernetes.client import _LineChunks

    class Response:
        def __init__(self, chunks):
            self.chunks, self.status = chunks, 200

        def stream(self, amt=None, decode_content=False):
            return iter(self.chunks)

    lines = [json.dumps({"type": "ADDED", "object": {"metadata": {"name": f"p{i}"}, "pad": "x" * i}}) for i in range(300)]
    raw = "".join(f"{line}\n" for line in lines).encode()
    for chunks in ([raw], [raw[i:i + 333] for i in range(0, len(raw), 333)], [raw[:10], raw[10:], b""]):
        wrapped = _LineChunks(Response(chunks))
        segments = list(wrapped.stream())
        assert all(seg.count(b"\n") == 1 and seg.endswith(b"\n") for seg in segments)
        assert list(iter_resp_lines(_LineChunks(Response(chunks)))) == lines == list(iter_resp_lines(Response(chunks)))
        assert wrapped.status == 200  # every other attribute is the response's


def test_a_pod_reported_while_the_nodes_are_re_listed_is_in_the_resynced_set_or_reported_after_it() -> None:
    """A 410 re-lists the nodes on their own thread; its ``Resynced`` carries the pods the pod
    stream holds at that moment, and the reconciler marks gone every pod it holds that is not in
    it. Found by ``kalena bench kubernetes --arrival-rate 300``: a pod the pod stream reported
    between the nodes re-list's reading of that set and its handing the ``Resynced`` on came
    before it, was missing from it, and was marked gone ("absent from the re-list") while it
    waited in the API server. Here the pod stream reports a pod at exactly that moment."""
    from agents.orchestrators.kubernetes.watch import KubernetesWatcher

    class Listing:
        def list_objects(self, resource):
            assert resource == "nodes"
            return [node("n1")], "7"

    watcher = KubernetesWatcher(Listing())
    late = pod("batch", "late", tier="batch")
    late["metadata"].update(uid="uid-late", resourceVersion="8")
    stream: list = []
    lock = threading.Lock()

    def out(event) -> None:
        if isinstance(event, Resynced):  # the pod stream reports a new pod now, on its own thread
            reporter = threading.Thread(target=watcher.emit, args=("pods", "ADDED", late,
                                                                   lambda e: [lock.acquire(), stream.append(e),
                                                                              lock.release()]))
            reporter.start()
            reporter.join(timeout=0.5)
            out.reporter = reporter
        with lock:
            stream.append(event)

    watcher._relist("nodes", out)
    out.reporter.join(timeout=10)
    assert any(isinstance(e, PodPending) and e.ref == "batch/late" for e in stream)
    held: set[str] = set()
    for event in stream:
        if isinstance(event, PodPending):
            held.add(event.ref)
        elif isinstance(event, Resynced):
            assert held <= event.pods, f"reported before a Resynced that lacks them: {held - event.pods}"
