"""The kubelet double's loops: node registration and heartbeats, the pod watch, and the sync that
admits, runs, restarts, reports and terminates the pods bound to the node (package README).

Threads: ``watch`` (list + watch of ``spec.nodeName=<node>`` pods through the ``kubernetes``
client: resourceVersion kept, a 410 re-lists), ``heartbeat`` (the Node's status every
``heartbeat_s``), ``sync`` (every ``sync_s`` or on a change), one ``terminate`` thread per pod being
deleted (its containers get the pod's grace), and the read API (:mod:`~agents.lab.kubelet.readapi`).
"""

from __future__ import annotations

import json
import logging
import platform
import threading
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from agents.lab.kubelet import spec as podspec
from agents.lab.kubelet import status as podstatus
from agents.lab.kubelet.runtime import LABEL_ATTEMPT, LABEL_CONTAINER, LABEL_UID, NodeRuntime

log = logging.getLogger("kalena.lab.kubelet")

KUBELET_VERSION = "v1.20.0-kalena-lab"
BACKOFF_START_S = 10.0
BACKOFF_MAX_S = 300.0


def now_rfc3339() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


class RuntimeDown(Exception):
    """The node's engine does not answer (its socket is gone or refuses): the kubelet skips pod
    sync, as the kubelet does while the container runtime is down, instead of failing pods."""


def runtime_unreachable(exc: BaseException) -> bool:
    """True when ``exc`` says the engine could not be reached (not that it refused a request)."""
    import requests

    return isinstance(exc, (requests.exceptions.ConnectionError, ConnectionError, FileNotFoundError))


@dataclass
class PodState:
    """What the kubelet remembers of one pod (keyed by uid)."""

    admitted: bool = False
    refused: bool = False
    final: bool = False          # terminal phase reported: nothing more to run
    terminating: bool = False    # a terminate thread owns the pod
    plan: podspec.PodPlan | None = None
    rel: str = ""
    restarts: dict[str, int] = field(default_factory=dict)
    last: dict[str, dict] = field(default_factory=dict)          # container → previous terminated state
    backoff_until: dict[str, float] = field(default_factory=dict)
    start_time: str | None = None
    sent: dict[str, Any] | None = None                           # the last status written


class Kubelet:
    """The kubelet double for one node (module doc).

    Args:
        node: the Node's name. api: ``kubernetes.client.ApiClient`` for the API server.
        runtime: the node's :class:`~agents.lab.kubelet.runtime.NodeRuntime`.
        address, port: the node's InternalIP and the read API's port (``daemonEndpoints``).
        cpu_mcpu, memory_bytes: the node's capacity (= allocatable: no system reserve).
        max_pods: capacity ``pods`` (110, the kubelet's default).
    """

    def __init__(self, *, node: str, api: Any, runtime: NodeRuntime, address: str, port: int, cpu_mcpu: int,
                 memory_bytes: int, max_pods: int = 110, heartbeat_s: float = 10.0, sync_s: float = 1.0,
                 memory_pressure_ratio: float = 0.95) -> None:
        from kubernetes import client

        self.node = node
        self.api = api
        self.core = client.CoreV1Api(api)
        self.runtime = runtime
        self.address, self.port = address, port
        self.cpu_mcpu, self.memory_bytes, self.max_pods = cpu_mcpu, memory_bytes, max_pods
        self.heartbeat_s, self.sync_s = heartbeat_s, sync_s
        self.memory_pressure_ratio = memory_pressure_ratio
        self.pods: dict[str, dict] = {}          # uid → the API's pod object
        self.state: dict[str, PodState] = {}
        self.lock = threading.RLock()
        self.wake = threading.Event()
        self.stopping = threading.Event()
        self.synced = threading.Event()          # the first list arrived
        self.started_s = time.time()
        self.start_rfc3339 = now_rfc3339()
        self.samples: dict[str, tuple[tuple[float, int], tuple[float, int]]] = {}  # rel → (previous, last) cpu ns
        self.threads: list[threading.Thread] = []
        self.errors: list[str] = []
        self._transitions: dict[str, tuple[bool, str]] = {}   # node condition → (status, since)
        self._runtime_down_logged = False
        #: uids of the pods with a running container at the last sync round (None: none listed yet)
        self.running_uids: set[str] | None = None

    # -- lifecycle -----------------------------------------------------------------------------------

    def start(self) -> None:
        self.runtime.setup(self.cpu_mcpu)
        self.register()
        for name, target in (("watch", self._watch_loop), ("heartbeat", self._heartbeat_loop), ("sync", self._sync_loop)):
            t = threading.Thread(target=target, name=f"kubelet-{self.node}-{name}", daemon=True)
            t.start()
            self.threads.append(t)

    def stop(self) -> None:
        """Stop the loops (the pods' containers keep running, as when a kubelet stops)."""
        self.stopping.set()
        self.wake.set()
        for t in self.threads:
            t.join(timeout=10)

    # -- API plumbing ---------------------------------------------------------------------------------

    def _raw(self, method, *args, **kwargs) -> dict:
        resp = method(*args, _preload_content=False, _request_timeout=10, **kwargs)
        try:
            return json.loads(resp.data or b"{}")
        finally:
            resp.release_conn()

    # -- the Node ---------------------------------------------------------------------------------

    def node_status(self) -> dict[str, Any]:
        """The Node's status as this kubelet reports it (capacity and allocatable cpu, memory,
        pods; conditions; addresses; the read API's port). Extended resources are not named, so a
        strategic-merge patch of this leaves the ones others publish in place."""
        now = now_rfc3339()
        resources = {"cpu": f"{self.cpu_mcpu}m", "memory": str(self.memory_bytes), "pods": str(self.max_pods)}
        usage = self.runtime.read_group(self.runtime.node_cgroup)
        working = usage.get("memory_usage_bytes", 0) - usage.get("inactive_file_bytes", 0)
        pressure = working >= self.memory_pressure_ratio * self.memory_bytes
        up = self._runtime_up()

        def condition(kind: str, value: bool, reason: str, message: str) -> dict:
            return {"type": kind, "status": "True" if value else "False", "reason": reason, "message": message,
                    "lastHeartbeatTime": now, "lastTransitionTime": self._transition(kind, value, now)}
        return {
            "capacity": resources, "allocatable": dict(resources),
            "conditions": [
                condition("MemoryPressure", pressure, "KubeletHasInsufficientMemory" if pressure else
                          "KubeletHasSufficientMemory", f"working set {working} of {self.memory_bytes} bytes"),
                condition("DiskPressure", False, "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
                condition("PIDPressure", False, "KubeletHasSufficientPID", "kubelet has sufficient PID available"),
                condition("Ready", up, "KubeletReady" if up else "KubeletNotReady",
                          "kubelet is posting ready status" if up else "container runtime is down")],
            "addresses": [{"type": "InternalIP", "address": self.address}, {"type": "Hostname", "address": self.node}],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": self.port}},
            "images": self._images(),
            "nodeInfo": {"kubeletVersion": KUBELET_VERSION, "kubeProxyVersion": KUBELET_VERSION,
                         "containerRuntimeVersion": "docker://lab", "operatingSystem": "linux",
                         "architecture": "amd64", "kernelVersion": platform.release(), "osImage": "kalena lab node",
                         "machineID": "", "systemUUID": "", "bootID": ""}}

    def _runtime_up(self) -> bool:
        """Whether the node's engine answers a ping (the kubelet's runtime health check)."""
        try:
            return bool(self.runtime.docker.ping())
        except Exception:  # noqa: BLE001 - any failure to answer is a runtime that is down
            return False

    def _images(self) -> list[dict[str, Any]]:
        try:
            return self.runtime.images()
        except Exception:  # noqa: BLE001 - the engine is busy: report none this beat
            return []

    def _transition(self, kind: str, value: bool, now: str) -> str:
        held = self._transitions.get(kind)
        if held is None or held[0] != value:
            self._transitions[kind] = (value, now)
        return self._transitions[kind][1]

    def register(self) -> None:
        """Create the Node when the API server has none of that name (then its status is patched:
        an existing Node keeps its labels, taints and the extended resources others published)."""
        from kubernetes.client.rest import ApiException

        try:
            self._raw(self.core.read_node, self.node)
        except ApiException as exc:
            if exc.status != 404:
                raise
            body = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": self.node, "labels": {
                "kubernetes.io/hostname": self.node, "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64",
                "beta.kubernetes.io/os": "linux", "beta.kubernetes.io/arch": "amd64"}},
                "spec": {}, "status": self.node_status()}
            try:
                self._raw(self.core.create_node, body)
                log.info("registered node %s", self.node)
            except ApiException as exc2:
                if exc2.status != 409:
                    raise
        self.heartbeat()

    def heartbeat(self) -> None:
        self._raw(self.core.patch_node_status, self.node, {"status": self.node_status()},
                  _content_type="application/strategic-merge-patch+json")

    def _heartbeat_loop(self) -> None:
        while not self.stopping.wait(self.heartbeat_s):
            try:
                self.heartbeat()
            except Exception as exc:  # noqa: BLE001 - the API may be down; try again next beat
                log.warning("node status update failed: %s", exc)

    def allocatable(self) -> dict[str, float]:
        """The Node's ``status.allocatable`` from the API (extended resources included), as amounts."""
        node = self._raw(self.core.read_node, self.node)
        return podspec.allocatable_amounts((node.get("status") or {}).get("allocatable") or {})

    # -- the pod watch ----------------------------------------------------------------------------

    def _watch_loop(self) -> None:
        from kubernetes import watch
        from kubernetes.client.rest import ApiException

        selector = f"spec.nodeName={self.node}"
        version = ""
        backoff = 0.5
        while not self.stopping.is_set():
            try:
                if not version:
                    listed = self._raw(self.core.list_pod_for_all_namespaces, field_selector=selector)
                    with self.lock:
                        self.pods = {p["metadata"]["uid"]: p for p in listed.get("items") or []}
                    version = (listed.get("metadata") or {}).get("resourceVersion") or ""
                    self.synced.set()
                    self.wake.set()
                w = watch.Watch()
                for event in w.stream(self.core.list_pod_for_all_namespaces, field_selector=selector,
                                      resource_version=version, allow_watch_bookmarks=True, timeout_seconds=30,
                                      _request_timeout=60):
                    if self.stopping.is_set():
                        w.stop()
                        break
                    obj = event["raw_object"]
                    version = (obj.get("metadata") or {}).get("resourceVersion") or version
                    if event["type"] == "BOOKMARK":
                        continue
                    uid = obj["metadata"]["uid"]
                    with self.lock:
                        if event["type"] == "DELETED":
                            self.pods.pop(uid, None)
                        else:
                            self.pods[uid] = obj
                    self.wake.set()
                backoff = 0.5
            except ApiException as exc:
                if exc.status == 410:   # too old: re-list and watch from the list's version
                    version = ""
                    continue
                log.warning("pod watch failed: %s", exc)
                self.stopping.wait(backoff)
                backoff = min(backoff * 2, 10.0)
            except Exception as exc:  # noqa: BLE001 - connection trouble: back off, keep the version
                log.warning("pod watch failed: %s", exc)
                self.stopping.wait(backoff)
                backoff = min(backoff * 2, 10.0)

    # -- sync -------------------------------------------------------------------------------------

    def _sync_loop(self) -> None:
        self.synced.wait(30)
        self._recover()
        while not self.stopping.is_set():
            self.wake.wait(self.sync_s)
            self.wake.clear()
            if self.stopping.is_set():
                break
            try:
                self.sync()
                self._runtime_down_logged = False
            except Exception as exc:  # noqa: BLE001 - one bad round must not stop the kubelet
                if isinstance(exc, RuntimeDown) or runtime_unreachable(exc):
                    self.running_uids = set()   # the engine's containers died with it
                    if not self._runtime_down_logged:
                        log.warning("container runtime is down: skipping pod sync until it answers (%s)", exc)
                    self._runtime_down_logged = True
                    continue
                log.exception("sync failed")
                self.errors = [*self.errors[-19:], f"{type(exc).__name__}: {exc}"]   # the last 20

    def _recover(self) -> None:
        """After a restart: pods whose containers the engine still holds were admitted before."""
        held: dict[str, list[dict]] = {}
        for c in self.runtime.containers():
            held.setdefault(c["Config"]["Labels"][LABEL_UID], []).append(c)
        with self.lock:
            pods = dict(self.pods)
        for uid, pod in pods.items():
            if uid in held and (pod.get("status") or {}).get("phase") not in podspec.TERMINAL_PHASES:
                st = self.state.setdefault(uid, PodState())
                st.admitted = True
                st.plan = podspec.pod_plan(pod, memory_capacity_bytes=self.memory_bytes)
                st.rel = podspec.pod_cgroup(self.runtime.node_cgroup, uid, st.plan.qos)
                st.start_time = (pod.get("status") or {}).get("startTime")
                for c in held[uid]:
                    name = c["Config"]["Labels"][LABEL_CONTAINER]
                    st.restarts[name] = max(st.restarts.get(name, 0), int(c["Config"]["Labels"].get(LABEL_ATTEMPT, 0)))

    def sync(self) -> None:
        """One round over every pod (module doc)."""
        with self.lock:
            pods = dict(self.pods)
        self._sample()
        order = sorted(pods, key=lambda u: ((pods[u].get("metadata") or {}).get("creationTimestamp") or "", u))
        allocatable: dict[str, float] | None = None
        held: dict[str, list[dict]] = {}
        for c in self.runtime.containers():   # one list call a round
            held.setdefault(c["Config"]["Labels"].get(LABEL_UID, ""), []).append(c)
        self.running_uids = {u for u, cs in held.items() if any(c["State"].get("Running") for c in cs)}
        for uid in order:
            pod = pods[uid]
            st = self.state.setdefault(uid, PodState())
            meta = pod.get("metadata") or {}
            if meta.get("deletionTimestamp"):
                if not st.terminating:
                    st.terminating = True
                    threading.Thread(target=self._terminate, args=(uid, pod), daemon=True,
                                     name=f"kubelet-terminate-{meta.get('name')}").start()
                continue
            if st.final or st.refused:
                continue
            if not st.admitted:
                if (pod.get("status") or {}).get("phase") in podspec.TERMINAL_PHASES:
                    st.final = True       # terminal before this kubelet saw it
                    continue
                if allocatable is None:
                    allocatable = self.allocatable()
                if not self._admit(uid, pod, allocatable):
                    continue
            self._run(uid, pod, st, held.get(uid, []))
        for uid in [u for u in self.state if u not in pods]:
            self._forget(uid)

    def _admitted_pods(self, pods_by_uid: dict[str, dict]) -> list[dict]:
        return [pods_by_uid[u] for u, s in self.state.items()
                if s.admitted and not s.final and u in pods_by_uid]

    def _admit(self, uid: str, pod: dict, allocatable: dict[str, float]) -> bool:
        st = self.state[uid]
        meta = pod["metadata"]
        with self.lock:
            others = self._admitted_pods(dict(self.pods))
        try:
            refusal = podspec.admit(pod, others, allocatable)
            plan = podspec.pod_plan(pod, memory_capacity_bytes=self.memory_bytes) if refusal is None else None
        except podspec.SpecError as exc:
            self._patch_status(pod, {"phase": "Failed", "reason": "UnexpectedAdmissionError", "message": str(exc)})
            st.refused = True
            return False
        if refusal is not None:
            log.info("pod %s/%s refused: %s", meta.get("namespace"), meta.get("name"), refusal.message)
            self._patch_status(pod, {"phase": "Failed", "reason": refusal.reason, "message": refusal.message,
                                     "qosClass": podspec.qos_class(pod), "hostIP": self.address})
            st.refused = True
            return False
        assert plan is not None
        st.admitted, st.plan = True, plan
        st.rel = podspec.pod_cgroup(self.runtime.node_cgroup, uid, plan.qos)
        self.runtime.pod_group_create(st.rel, plan)
        self._burstable_shares()
        st.start_time = now_rfc3339()
        return True

    def _burstable_shares(self) -> None:
        total = sum(s.plan.cpu_shares * 1000 / 1024 for s in self.state.values()
                    if s.admitted and not s.final and s.plan is not None and s.plan.qos == "Burstable")
        self.runtime.burstable_shares(total)

    def _run(self, uid: str, pod: dict, st: PodState, containers: list[dict]) -> None:
        """Start, restart and report the pod's containers (restart back-off 10 s doubling to 300 s)."""
        assert st.plan is not None
        policy = (pod.get("spec") or {}).get("restartPolicy") or "Always"
        latest: dict[str, dict] = {}
        for c in containers:
            labels = c["Config"]["Labels"]
            name, attempt = labels[LABEL_CONTAINER], int(labels.get(LABEL_ATTEMPT, 0))
            if name not in latest or attempt >= int(latest[name]["Config"]["Labels"].get(LABEL_ATTEMPT, 0)):
                latest[name] = c
        statuses = []
        now_s = time.time()
        for plan in st.plan.containers:
            current = latest.get(plan.name)
            restarts = st.restarts.get(plan.name, 0)
            waiting = None
            if current is None and plan.name not in st.last:
                current = self._start(pod, st, plan, restarts)
            if current is None or (not current["State"].get("Running") and current["State"].get("Status") != "created"):
                ended = podstatus.terminated_state(current) if current is not None else st.last[plan.name]
                code = int(ended["terminated"].get("exitCode") or 0)
                if policy == "Always" or (policy == "OnFailure" and code != 0):
                    st.last[plan.name] = ended
                    due = st.backoff_until.setdefault(
                        plan.name, now_s + min(BACKOFF_MAX_S, BACKOFF_START_S * 2 ** restarts))
                    if now_s >= due:
                        if current is not None:
                            self.runtime.remove(current["Id"])
                        st.restarts[plan.name] = restarts = restarts + 1
                        st.backoff_until.pop(plan.name, None)
                        current = self._start(pod, st, plan, restarts)
                        if current is None:
                            waiting = ("CrashLoopBackOff", st.last[plan.name]["terminated"].get("message", ""))
                    else:
                        backoff = min(BACKOFF_MAX_S, BACKOFF_START_S * 2 ** restarts)
                        waiting = ("CrashLoopBackOff", f"back-off {backoff:.0f}s restarting failed container="
                                   f"{plan.name} pod={pod['metadata']['name']}_{pod['metadata'].get('namespace')}"
                                   f"({uid})")
            statuses.append(podstatus.container_status(
                plan.name, self._image(pod, plan.name), current, restarts=restarts, last=st.last.get(plan.name),
                waiting=waiting))
        phase = podstatus.pod_phase(statuses, policy)
        if phase in podspec.TERMINAL_PHASES:
            st.final = True
            self._burstable_shares()
        previous = ((st.sent or pod.get("status") or {}).get("conditions")) or []
        body = {"phase": phase, "qosClass": st.plan.qos, "hostIP": self.address, "startTime": st.start_time,
                "conditions": podstatus.conditions(phase, statuses, previous, now=now_rfc3339()),
                "containerStatuses": statuses}
        self._patch_status(pod, body)

    @staticmethod
    def _image(pod: dict, name: str) -> str:
        for c in (pod.get("spec") or {}).get("containers") or []:
            if c.get("name") == name:
                return str(c.get("image") or "")
        return ""

    def _start(self, pod: dict, st: PodState, plan: podspec.ContainerPlan, attempt: int) -> dict | None:
        try:
            container_id = self.runtime.run(pod, st.rel, plan, attempt)
            return self.runtime.docker.api.inspect_container(container_id)
        except Exception as exc:  # noqa: BLE001 - the engine refused: report it as the kubelet does
            if runtime_unreachable(exc):       # not a refusal: the pod waits (ContainerCreating) and is retried
                raise RuntimeDown(str(exc)) from exc
            log.warning("pod %s: container %s did not start: %s", pod["metadata"]["name"], plan.name, exc)
            st.last[plan.name] = {"terminated": {"exitCode": 128, "reason": "StartError", "message": str(exc)[:500]}}
            return None

    def _patch_status(self, pod: dict, status: dict) -> None:
        from kubernetes.client.rest import ApiException

        uid = pod["metadata"]["uid"]
        st = self.state.setdefault(uid, PodState())
        if st.sent == status:
            return
        meta = pod["metadata"]
        try:
            self._raw(self.core.patch_namespaced_pod_status, meta["name"], meta.get("namespace", "default"),
                      {"metadata": {"uid": uid}, "status": status},
                      _content_type="application/strategic-merge-patch+json")
            st.sent = status
        except ApiException as exc:
            if exc.status != 404:
                log.warning("pod %s status not written: %s", meta["name"], exc)

    # -- termination ------------------------------------------------------------------------------

    def _terminate(self, uid: str, pod: dict) -> None:
        """Stop the pod's containers with its grace, then delete the pod object (grace 0)."""
        from kubernetes import client
        from kubernetes.client.rest import ApiException

        grace = podspec.grace_s(pod)
        running = [c for c in self.runtime.containers(uid) if c["State"].get("Running")]
        threads = [threading.Thread(target=self.runtime.stop, args=(c["Id"], grace), daemon=True) for c in running]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        meta = pod["metadata"]
        log.info("pod %s/%s: %d container(s) stopped (grace %.0f s); deleting", meta.get("namespace"),
                 meta.get("name"), len(running), grace)
        try:
            self._raw(self.core.delete_namespaced_pod, meta["name"], meta.get("namespace", "default"),
                      body=client.V1DeleteOptions(grace_period_seconds=0,
                                                  preconditions=client.V1Preconditions(uid=uid)))
        except ApiException as exc:
            if exc.status not in (404, 409):
                log.warning("pod %s not deleted: %s", meta["name"], exc)
        self.wake.set()

    def _forget(self, uid: str) -> None:
        """The pod left the API: its containers and its group go (forced, as for a force delete)."""
        st = self.state.pop(uid)
        for c in self.runtime.containers(uid):
            self.runtime.remove(c["Id"])
        if st.rel:
            self.runtime.pod_group_remove(st.rel)
            self.samples.pop(st.rel, None)
        if st.admitted and not st.final:
            self._burstable_shares()

    # -- the read API's numbers -----------------------------------------------------------------------

    def _sample(self) -> None:
        now = time.time()
        groups = [self.runtime.node_cgroup] + [s.rel for s in self.state.values() if s.admitted and s.rel]
        for rel in groups:
            ns = self.runtime.read_group(rel).get("cpu_usage_ns")
            if ns is None:
                continue
            held = self.samples.get(rel)
            self.samples[rel] = ((held[1] if held else (now, ns)), (now, ns))

    def cpu_nanocores(self, rel: str) -> tuple[int | None, int | None]:
        """``(usageNanoCores, usageCoreNanoSeconds)`` of a group from the last two samples."""
        held = self.samples.get(rel)
        if held is None:
            return None, None
        (t0, n0), (t1, n1) = held
        return (int((n1 - n0) / (t1 - t0)) if t1 > t0 else None), n1

    def pod_list(self) -> dict[str, Any]:
        """``/pods``: a ``v1.PodList`` of the pods bound here, each with the status this kubelet wrote."""
        with self.lock:
            pods = [dict(p) for p in self.pods.values()]
        items = []
        for pod in pods:
            st = self.state.get(pod["metadata"]["uid"])
            if st is not None and st.sent is not None:
                pod["status"] = {**(pod.get("status") or {}), **st.sent}
            items.append(pod)
        return {"kind": "PodList", "apiVersion": "v1", "metadata": {}, "items": items}

    def summary(self) -> dict[str, Any]:
        """``/stats/summary`` (``stats/v1alpha1`` Summary): the node's and each running pod's cpu
        and memory from their cgroups, the node's PSI from its unified group.

        A pod is listed only while one of its containers runs (at the last sync round): a pod whose
        containers died — the engine stopped, or a container between restarts — has no stats, as
        the kubelet's summary lists pods from the runtime's containers. Its empty cgroup would read
        0 and the agent would take that for the pod's usage; without a sample the pod ages to
        T_stale and the ledgers hold it at ``max(r, q)`` (docs/design.md §5)."""
        from agents.collectors.psi import parse_psi

        now = now_rfc3339()

        def memory(rel: str) -> dict[str, Any]:
            read = self.runtime.read_group(rel)
            usage = read.get("memory_usage_bytes", 0)
            return {"time": now, "usageBytes": usage,
                    "workingSetBytes": max(0, usage - read.get("inactive_file_bytes", 0))}

        def cpu(rel: str) -> dict[str, Any]:
            nano, total = self.cpu_nanocores(rel)
            out: dict[str, Any] = {"time": now}
            if nano is not None:
                out["usageNanoCores"] = nano
            if total is not None:
                out["usageCoreNanoSeconds"] = total
            return out

        node_cpu, node_memory = cpu(self.runtime.node_cgroup), memory(self.runtime.node_cgroup)
        node_memory["availableBytes"] = max(0, self.memory_bytes - node_memory["workingSetBytes"])
        for resource, text in self.runtime.pressure(self.runtime.node_cgroup).items():
            psi = parse_psi(text, source=resource)
            block = {kind: {"avg10": line.avg10_pct, "avg60": line.avg60_pct, "avg300": line.avg300_pct,
                            "total": line.total_us}
                     for kind, line in (("some", psi.some), ("full", psi.full)) if line is not None}
            {"cpu": node_cpu, "memory": node_memory}.get(resource, {})["psi"] = block
        pods = []
        with self.lock:
            known = dict(self.pods)
        for uid, st in list(self.state.items()):
            pod = known.get(uid)
            if pod is None or not st.admitted or st.final or not st.rel:
                continue
            if self.running_uids is not None and uid not in self.running_uids:
                continue
            meta = pod["metadata"]
            pods.append({"podRef": {"name": meta["name"], "namespace": meta.get("namespace", "default"), "uid": uid},
                         "startTime": st.start_time, "cpu": cpu(st.rel), "memory": memory(st.rel), "containers": []})
        return {"node": {"nodeName": self.node, "startTime": self.start_rfc3339, "cpu": node_cpu,
                         "memory": node_memory}, "pods": pods}

    def healthy(self) -> bool:
        return self.synced.is_set() and all(t.is_alive() for t in self.threads) and not self.stopping.is_set()

