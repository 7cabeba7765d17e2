"""``kalena bench kubernetes --wire-cost N``: the CPU the two API calls every bound pod needs
cost in this process — the Binding (``pods/binding``) and its ``Scheduled`` Event — made as the
scheduler makes them (:meth:`~agents.orchestrators.kubernetes.KubernetesOrchestrator.bind`, the
Event sent by the client's event thread), against the test API server in its own process, one
pod after another; beside it the same Event POSTed through ``http.client`` on one keep-alive
connection (Python's plainest HTTP client) and through ``urllib3`` (the ``kubernetes``
client's transport) directly. No database, no scheduling: what the wire alone costs per pod,
against the allowance of issue 31's floor (1,500 pods per CPU-second = 667 µs of CPU per pod).
Prints figures; not a timed test.
"""

from __future__ import annotations

import http.client
import json
import time

FLOOR_PODS_PER_CPU_S = 1500.0


def _per_call_us(calls: int, fn) -> float:
    """Process CPU per call (µs) of ``calls`` calls of ``fn(i)`` (``i`` counts every call), after
    ``calls // 10`` unmeasured."""
    warm = calls // 10
    for i in range(warm):
        fn(i)
    start = time.process_time()
    for i in range(warm, warm + calls):
        fn(i)
    return (time.process_time() - start) / calls * 1e6


def run(calls: int) -> dict[str, float]:
    """The figures (µs of CPU per call or per pod) for ``calls`` pods."""
    import urllib3
    from kubernetes import client as k8s

    from agents.orchestrators.base import BatchSpec
    from agents.orchestrators.kubernetes import KubernetesOrchestrator
    from agents.orchestrators.kubernetes.testserver import node
    from kalena_web.cli.bench_kubernetes import _ServerProcess

    total = calls + calls // 10
    api = _ServerProcess(bookmark_interval_s=30.0)
    try:
        api.ask("nodes", [node("wire-0", cpu="100000m", memory=str(2**40))])
        api.ask("pods", total, 1, [10] * total, [16] * total, 0.0)
        while api.ask("progress")[1]:
            time.sleep(0.1)
        orch = KubernetesOrchestrator(k8s.ApiClient(k8s.Configuration(host=api.url)), request_timeout_s=10.0,
                                      identity="bench-wire")

        # each pod's uid, as the scheduler knows it from its watch (the Binding's precondition and the
        # Event's involvedObject; without it the Event would read the pod first)
        uids = {item.metadata.name: item.metadata.uid for item in orch.core.list_namespaced_pod("bench").items}

        def bind(i: int) -> None:
            orch.bind(BatchSpec(id=f"bench/job-0-{i}", uid=uids[f"job-0-{i}"]), "wire-0")

        bind_us = _per_call_us(calls, bind)
        start = time.process_time()
        orch.flush_events(timeout_s=600.0)  # the Events still queued: counted with the binds
        bind_us += (time.process_time() - start) / calls * 1e6
        event = json.dumps({"apiVersion": "v1", "kind": "Event",
                            "metadata": {"generateName": "wire.", "namespace": "bench"},
                            "involvedObject": {"apiVersion": "v1", "kind": "Pod", "namespace": "bench",
                                               "name": "job-0-0"},
                            "reason": "Scheduled", "message": "Successfully assigned bench/job-0-0 to wire-0",
                            "type": "Normal", "source": {"component": "kalena"}})
        path = "/api/v1/namespaces/bench/events"
        pool = urllib3.PoolManager()
        urllib3_us = _per_call_us(calls, lambda i: pool.request(
            "POST", api.url + path, body=event, headers={"Content-Type": "application/json"}))
        conn = http.client.HTTPConnection(api.url.split("//", 1)[1])

        def plain(i: int) -> None:
            conn.request("POST", path, body=event, headers={"Content-Type": "application/json"})
            conn.getresponse().read()

        plain_us = _per_call_us(calls, plain)
    finally:
        api.stop()
    allowance = 1e6 / FLOOR_PODS_PER_CPU_S
    return {"pods": calls, "bind_and_event_us_per_pod": round(bind_us, 1),
            "event_post_urllib3_us": round(urllib3_us, 1), "event_post_http_client_us": round(plain_us, 1),
            "floor_allowance_us_per_pod": round(allowance, 1),
            "two_calls_urllib3_us": round(2 * urllib3_us, 1), "two_calls_http_client_us": round(2 * plain_us, 1)}


def handle(calls: int, summary_json=None) -> int:
    print(f"kalena bench kubernetes --wire-cost: {calls} pods bound and their Events sent, one after another")
    figures = run(calls)
    for key, value in figures.items():
        print(f"  {key}: {value}")
    left = figures["floor_allowance_us_per_pod"] - figures["bind_and_event_us_per_pod"]
    print(f"  left per pod for the watch, the cache, the cycle, the reconciler and the database at the floor: "
          f"{left:.0f} µs")
    if summary_json:
        summary_json.write_text(json.dumps(figures, indent=2))
    return 0
