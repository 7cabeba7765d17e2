"""Controller doubles of the test API server — Job → pods, Deployment → ReplicaSet → pods,
StatefulSet → ordinal pods, DaemonSet → a pod per node — as kube-controller-manager's controllers
shape what they write (no HTTP here; :class:`Controllers` runs them on one thread of the server, see
:mod:`agents.orchestrators.kubernetes.testserver`).

Jobs: a Job's defaulting (``spec.selector`` on ``controller-uid``, the template's
``controller-uid`` and ``job-name`` labels, ``parallelism``/``completions`` 1, ``backoffLimit``
6, ``status.startTime``); its pods, created from the template through the server's pod
admission with ``generateName: <job>-``, those labels and a controlling ``ownerReference``;
``min(parallelism, completions − succeeded)`` active pods, a replacement for each pod that
failed or was deleted before it succeeded; a failed or deleted pod counts toward
``status.failed`` unless a ``podFailurePolicy`` rule with ``action: Ignore`` matches a
condition it carried (``DisruptionTarget`` after an eviction); ``status.failed >
backoffLimit`` → condition ``Failed``/``BackoffLimitExceeded`` and no more pods; ``succeeded
≥ completions`` → condition ``Complete`` and ``completionTime``.

Deployments: one ReplicaSet per pod template, ``<deployment>-<pod-template-hash>`` with the hash
in its selector and template labels (and so in its pods'), scaled to ``spec.replicas``; a changed
template → a new ReplicaSet and the old ones scaled to 0 at once. ReplicaSets keep
``spec.replicas`` live pods (``generateName: <rs>-``) and report replicas/ready/available.
StatefulSets and DaemonSets: see :class:`StatefulSetController` and :class:`DaemonSetController`.

What they do not model: indexed completion, ``activeDeadlineSeconds``, ``ttlSecondsAfterFinished``,
backoff delays between replacements (a pod creation the API refused is retried: see
:class:`Controllers`), suspend, pod-tracking finalizers, exit-code rules of a
``podFailurePolicy`` (``onExitCodes``), ``FailJob``/``Count`` actions (only ``Ignore`` changes
the count); rolling-update pacing (``maxSurge``/``maxUnavailable``), ``minReadySeconds``,
revision history limits, rollback, paused Deployments; StatefulSet volume claim templates
and rolling updates of existing ordinals; DaemonSet rolling updates and the scheduler's binding
of its pods; adoption of orphans by selector (only
pods and ReplicaSets a controller created, by ``ownerReference``); deleting what an object
owns when it is deleted (no garbage collector); the Deployment controller's exact hash value.
"""

from __future__ import annotations

import copy
import json
import threading
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING

from agents.orchestrators.kubernetes.teststore import RESOURCES, APIError, key_of, now_rfc3339

if TYPE_CHECKING:
    from agents.orchestrators.kubernetes.testserver import TestAPIServer


def ignored_by_policy(job: Mapping, pod: Mapping) -> bool:
    """Whether a ``podFailurePolicy`` rule with ``action: Ignore`` matches one of the pod's
    conditions with status ``True`` (e.g. ``DisruptionTarget``: an evicted pod is not a
    failure of its work)."""
    conditions = {(c.get("type"), c.get("status")) for c in (pod.get("status") or {}).get("conditions") or []}
    for rule in ((job.get("spec") or {}).get("podFailurePolicy") or {}).get("rules") or []:
        if rule.get("action") != "Ignore":
            continue
        for wanted in rule.get("onPodConditions") or []:
            if (wanted.get("type"), wanted.get("status", "True")) in conditions:
                return True
    return False


def _owner_uid(obj: Mapping, kind: str) -> str:
    for ref in (obj.get("metadata") or {}).get("ownerReferences") or []:
        if ref.get("controller") and ref.get("kind") == kind:
            return str(ref.get("uid") or "")
    return ""


#: a reconcile the API refused is tried again after this many seconds, doubling up to RETRY_MAX_S
RETRY_START_S = 0.5
RETRY_MAX_S = 30.0


class Controllers:
    """One thread that follows the store's change log and hands each controller double the
    keys a change touches (a controller's own object, or the owner of a pod or ReplicaSet it
    controls); a compacted log → every object is reconciled. A reconcile the API refused (a pod's
    admission webhook failing, a conflict) is tried again after ``RETRY_START_S`` doubling to
    ``RETRY_MAX_S``, as a controller requeues a key whose sync failed."""

    def __init__(self, server: TestAPIServer) -> None:
        self.store = server.store
        self.controllers = [JobController(server), ReplicaSetController(server), DeploymentController(server),
                            StatefulSetController(server), DaemonSetController(server)]
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="kube-test-controllers", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        with self.store.lock:
            self.store.changed.notify_all()
        self._thread.join(timeout=5.0)

    def _run(self) -> None:
        seen_rv = 0  # from the start: objects created before the thread are reconciled too
        #: (controller, key) → (when to try again, delay): a reconcile the API refused (a pod's
        #: admission, a conflict) is tried again later, as a controller's rate-limited requeue does
        retry: dict[tuple[_Controller, str], tuple[float, float]] = {}
        while not self._stop.is_set():
            now = time.monotonic()
            work: dict[_Controller, set[str]] = {}
            for (controller, key), (due, _delay) in retry.items():
                if due <= now:
                    work.setdefault(controller, set()).add(key)
            with self.store.lock:
                changes = self.store.changes_after(seen_rv)
                if not changes and not work:
                    self.store.wait(max(0.01, min([1.0, *(due - now for due, _ in retry.values())])))
                    continue
                if changes:
                    resync = seen_rv < self.store.compacted_rv
                    seen_rv = changes[-1].rv
                    for c in self.controllers:
                        work.setdefault(c, set()).update(c.touched(changes, resync))
            for controller in self.controllers:
                for key in sorted(work.get(controller, ())):
                    try:
                        controller.reconcile(key)
                        retry.pop((controller, key), None)
                    except APIError as exc:
                        if exc.code == 404:  # deleted meanwhile
                            retry.pop((controller, key), None)
                            continue
                        delay = min(RETRY_MAX_S, 2 * retry.get((controller, key), (0.0, RETRY_START_S / 2))[1])
                        retry[(controller, key)] = (time.monotonic() + delay, delay)


class _Controller:
    """A controller double: ``resource`` it reconciles, ``owned`` the resource whose objects it
    controls (by a controlling ``ownerReference`` of kind ``kind``)."""

    resource = ""
    owned = ""

    def __init__(self, server: TestAPIServer) -> None:
        self.server = server
        self.store = server.store

    @property
    def kind(self) -> str:
        return RESOURCES[self.resource].kind

    def touched(self, changes: list, resync: bool) -> set[str]:
        """Keys of the objects ``changes`` concern (caller holds the store lock)."""
        by_uid = {o["metadata"]["uid"]: k for k, o in self.store.objects[self.resource].items()}
        keys: set[str] = set(by_uid.values()) if resync else set()
        for c in changes:
            if c.resource == self.resource and c.type != "DELETED":
                keys.add(key_of(c.obj))
            elif c.resource == self.owned and (uid := _owner_uid(c.obj, self.kind)) in by_uid:
                keys.add(by_uid[uid])
                self.seen_owned(by_uid[uid], c)
        return keys

    def seen_owned(self, key: str, change) -> None:
        """A change to an object ``key`` controls (caller holds the store lock)."""

    def children(self, uid: str) -> list[dict]:
        with self.store.lock:
            return [copy.deepcopy(o) for o in self.store.objects[self.owned].values()
                    if _owner_uid(o, self.kind) == uid]


def _owner_ref(obj: Mapping) -> dict:
    return {"apiVersion": obj["apiVersion"], "kind": obj["kind"], "name": obj["metadata"]["name"],
            "uid": obj["metadata"]["uid"], "controller": True, "blockOwnerDeletion": True}


def _live(pod: Mapping) -> bool:
    return ((pod.get("status") or {}).get("phase") not in ("Succeeded", "Failed")
            and not (pod.get("metadata") or {}).get("deletionTimestamp"))


class JobController(_Controller):
    """Jobs → pods (see the module docstring)."""

    resource, owned = "jobs", "pods"

    def __init__(self, server: TestAPIServer) -> None:
        super().__init__(server)
        #: pod uids already counted as failed or succeeded (a pod counts once)
        self._counted: set[str] = set()

    def seen_owned(self, key: str, change) -> None:
        phase = (change.obj.get("status") or {}).get("phase")
        if change.type == "DELETED" or phase in ("Failed", "Succeeded"):
            self._count(key, change.obj, "Succeeded" if phase == "Succeeded" else "Failed")

    def _count(self, job_key: str, pod: Mapping, outcome: str) -> None:
        """Count a finished or deleted pod once in its Job's status (caller holds the lock)."""
        uid = (pod.get("metadata") or {}).get("uid", "")
        if uid in self._counted:
            return
        self._counted.add(uid)
        job = self.store.objects["jobs"][job_key]
        if outcome == "Failed" and ignored_by_policy(job, pod):
            return
        field = "succeeded" if outcome == "Succeeded" else "failed"

        def bump(j: dict) -> None:
            status = j.setdefault("status", {})
            status[field] = int(status.get(field) or 0) + 1
        self.store.mutate("jobs", job_key, bump)

    def reconcile(self, key: str) -> None:
        """Default the Job, create the pods it lacks, set its conditions.

        Raises:
            APIError: 404 when the Job is gone; what pod admission raises.
        """
        job = self.store.get("jobs", key)
        if "controller-uid" not in ((job["spec"].get("selector") or {}).get("matchLabels") or {}):
            job = self.store.mutate("jobs", key, _default)
        spec, status = job["spec"], job.get("status") or {}
        if any(c.get("status") == "True" for c in status.get("conditions") or []):
            return  # Complete or Failed: finished
        active = sum(1 for p in self.children(job["metadata"]["uid"]) if _live(p))
        succeeded, failed = int(status.get("succeeded") or 0), int(status.get("failed") or 0)
        completions = int(spec.get("completions") if spec.get("completions") is not None else 1)
        if failed > int(spec.get("backoffLimit", 6)):
            self._finish(key, "Failed", "BackoffLimitExceeded", "Job has reached the specified backoff limit")
            return
        if succeeded >= completions:
            self._finish(key, "Complete", "", "")
            return
        for _ in range(max(0, min(int(spec.get("parallelism", 1)), completions - succeeded) - active)):
            self.server.create_pod(_pod_from(job))
        if active != int(status.get("active") or 0):
            self.store.mutate("jobs", key, lambda j: j.setdefault("status", {}).__setitem__("active", active))

    def _finish(self, key: str, type_: str, reason: str, message: str) -> None:
        def finish(j: dict) -> None:
            status = j.setdefault("status", {})
            status["conditions"] = [*(status.get("conditions") or []),
                                    {"type": type_, "status": "True", "reason": reason, "message": message,
                                     "lastProbeTime": now_rfc3339(), "lastTransitionTime": now_rfc3339()}]
            status["active"] = 0
            if type_ == "Complete":
                status["completionTime"] = now_rfc3339()
        self.store.mutate("jobs", key, finish)


def _default(job: dict) -> None:
    """The API server's and the controller's defaults of a new Job."""
    uid, name = job["metadata"]["uid"], job["metadata"]["name"]
    spec = job.setdefault("spec", {})
    spec.setdefault("parallelism", 1)
    spec.setdefault("completions", 1)
    spec.setdefault("backoffLimit", 6)
    spec["selector"] = {"matchLabels": {"controller-uid": uid}}
    template_meta = spec.setdefault("template", {}).setdefault("metadata", {})
    template_meta["labels"] = {**(template_meta.get("labels") or {}), "controller-uid": uid, "job-name": name}
    job.setdefault("status", {}).setdefault("startTime", now_rfc3339())


def _pod_from(job: Mapping) -> dict:
    """A pod of ``job`` (or a ReplicaSet) as its controller creates it (``GetPodFromTemplate``)."""
    template = copy.deepcopy((job.get("spec") or {}).get("template") or {})
    meta = template.get("metadata") or {}
    name, namespace = job["metadata"]["name"], job["metadata"]["namespace"]
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"generateName": f"{name}-", "namespace": namespace, "labels": meta.get("labels") or {},
                         "annotations": meta.get("annotations") or {},
                         "ownerReferences": [_owner_ref(job)]},
            "spec": template.get("spec") or {}, "status": {"phase": "Pending"}}


# -- ReplicaSets and Deployments ----------------------------------------------------------------

_SAFE = "bcdfghjklmnpqrstvwxz2456789"  # apimachinery's rand.SafeEncodeString alphabet


def pod_template_hash(template: Mapping) -> str:
    """A Deployment's ``pod-template-hash``: FNV-1a (32 bit) of the template's canonical JSON,
    written in the 27 consonants and digits Kubernetes uses (10 characters at most). Same
    template → same hash, another template → another; the value differs from the Deployment
    controller's own (it hashes the Go struct's printed form)."""
    data = json.dumps(template, sort_keys=True, separators=(",", ":")).encode()
    h = 0x811C9DC5
    for byte in data:
        h = ((h ^ byte) * 0x01000193) & 0xFFFFFFFF
    out = ""
    for digit in str(h):
        out += _SAFE[int(digit) * 2 + len(out) % 2]
    return out[:10]


class ReplicaSetController(_Controller):
    """ReplicaSets → pods: ``spec.replicas`` (default 1) live pods from the template
    (``generateName: <rs>-``, a controlling ``ownerReference``), the newest deleted first when
    scaled down; ``status.replicas`` / ``readyReplicas`` (Running) / ``availableReplicas``."""

    resource, owned = "replicasets", "pods"

    def reconcile(self, key: str) -> None:
        rs = self.store.get("replicasets", key)
        pods = sorted((p for p in self.children(rs["metadata"]["uid"]) if _live(p)),
                      key=lambda p: p["metadata"].get("creationTimestamp", ""))
        want = int((rs.get("spec") or {}).get("replicas", 1))
        for _ in range(want - len(pods)):
            self.server.create_pod(_pod_from(rs))
        for extra in reversed(pods[want:]):
            self.server.delete_pod(key_of(extra))
        running = sum(1 for p in pods[:want] if (p.get("status") or {}).get("phase") == "Running")
        status = {"replicas": len(pods), "readyReplicas": running, "availableReplicas": running,
                  "observedGeneration": 1}
        if {k: (rs.get("status") or {}).get(k) for k in status} != status:
            self.store.mutate("replicasets", key, lambda o: o.__setitem__("status", {**(o.get("status") or {}),
                                                                                    **status}))


class DeploymentController(_Controller):
    """Deployments → ReplicaSets: the ReplicaSet of the current template
    (``<deployment>-<pod-template-hash>``, the hash in its selector, template labels and name)
    gets ``spec.replicas`` (default 1); every other ReplicaSet it owns is scaled to 0 at once (a
    rollout without surge or unavailability pacing); ``status.replicas`` / ``readyReplicas`` /
    ``updatedReplicas`` / ``availableReplicas`` from its ReplicaSets."""

    resource, owned = "deployments", "replicasets"

    def reconcile(self, key: str) -> None:
        deploy = self.store.get("deployments", key)
        spec = deploy.get("spec") or {}
        template = copy.deepcopy(spec.get("template") or {})
        digest = pod_template_hash(template)
        name = f"{deploy['metadata']['name']}-{digest}"
        want = int(spec.get("replicas", 1))
        owned = self.children(deploy["metadata"]["uid"])
        if not any(rs["metadata"]["name"] == name for rs in owned):
            template.setdefault("metadata", {})["labels"] = {**(template.get("metadata") or {}).get("labels", {}),
                                                             "pod-template-hash": digest}
            selector = copy.deepcopy(spec.get("selector") or {"matchLabels": {}})
            selector.setdefault("matchLabels", {})["pod-template-hash"] = digest
            self.store.create("replicasets", {
                "apiVersion": "apps/v1", "kind": "ReplicaSet",
                "metadata": {"name": name, "namespace": deploy["metadata"]["namespace"],
                             "labels": template["metadata"]["labels"], "ownerReferences": [_owner_ref(deploy)],
                             "annotations": {"deployment.kubernetes.io/revision": str(len(owned) + 1)}},
                "spec": {"replicas": want, "selector": selector, "template": template}})
            owned = self.children(deploy["metadata"]["uid"])
        for rs in owned:
            replicas = want if rs["metadata"]["name"] == name else 0
            if int((rs.get("spec") or {}).get("replicas", 1)) != replicas:
                self.store.mutate("replicasets", key_of(rs),
                                  lambda o, n=replicas: o.setdefault("spec", {}).__setitem__("replicas", n))
        current = next((rs for rs in owned if rs["metadata"]["name"] == name), {})
        ready = sum(int((rs.get("status") or {}).get("readyReplicas") or 0) for rs in owned)
        status = {"replicas": sum(int((rs.get("status") or {}).get("replicas") or 0) for rs in owned),
                  "updatedReplicas": int((current.get("status") or {}).get("replicas") or 0),
                  "readyReplicas": ready, "availableReplicas": ready, "observedGeneration": 1}
        if {k: (deploy.get("status") or {}).get(k) for k in status} != status:
            self.store.mutate("deployments", key, lambda o: o.__setitem__("status", {**(o.get("status") or {}),
                                                                                    **status}))


# -- StatefulSets and DaemonSets ------------------------------------------------------------------


class StatefulSetController(_Controller):
    """StatefulSets → pods ``<set>-0`` … ``<set>-(replicas−1)``: each with the
    ``statefulset.kubernetes.io/pod-name`` and ``apps.kubernetes.io/pod-index`` labels, a
    ``controller-revision-hash`` label of the template, ``hostname`` its name and ``subdomain``
    the ``serviceName``; ``OrderedReady`` (the default) creates ordinal ``i`` only once every lower
    ordinal is Running, ``Parallel`` all at once; a missing ordinal is re-created under the same
    name; scaling down deletes the highest ordinals first."""

    resource, owned = "statefulsets", "pods"

    def reconcile(self, key: str) -> None:
        sts = self.store.get("statefulsets", key)
        spec = sts.get("spec") or {}
        name = sts["metadata"]["name"]
        want = int(spec.get("replicas", 1))
        pods = {p["metadata"]["name"]: p for p in self.children(sts["metadata"]["uid"]) if _live(p)}
        revision = f"{name}-{pod_template_hash(spec.get('template') or {})}"
        ordered = spec.get("podManagementPolicy", "OrderedReady") == "OrderedReady"
        for i in range(want):
            pod_name = f"{name}-{i}"
            if pod_name in pods:
                if ordered and (pods[pod_name].get("status") or {}).get("phase") != "Running":
                    break
                continue
            pod = _pod_from(sts)
            meta = pod["metadata"]
            del meta["generateName"]
            meta["name"] = pod_name
            meta["labels"] = {**meta["labels"], "statefulset.kubernetes.io/pod-name": pod_name,
                              "apps.kubernetes.io/pod-index": str(i), "controller-revision-hash": revision}
            pod["spec"]["hostname"] = pod_name
            if spec.get("serviceName"):
                pod["spec"]["subdomain"] = spec["serviceName"]
            self.server.create_pod(pod)
            if ordered:
                break
        ordinals = sorted((int(n[len(name) + 1:]) for n in pods if n[len(name) + 1:].isdigit()), reverse=True)
        for extra in [i for i in ordinals if i >= want][:1 if ordered else None]:
            self.server.delete_pod(f"{sts['metadata']['namespace']}/{name}-{extra}")
        running = sum(1 for p in pods.values() if (p.get("status") or {}).get("phase") == "Running")
        status = {"replicas": len(pods), "readyReplicas": running, "availableReplicas": running,
                  "currentRevision": revision, "updateRevision": revision}
        if {k: (sts.get("status") or {}).get(k) for k in status} != status:
            self.store.mutate("statefulsets", key, lambda o: o.__setitem__("status", {**(o.get("status") or {}),
                                                                                     **status}))


def tolerates(tolerations: list[Mapping], taints: list[Mapping]) -> bool:
    """Whether every ``NoSchedule``/``NoExecute`` taint is matched by a toleration (same key and
    ``operator: Exists`` or an equal value; an empty key with ``Exists`` matches every taint)."""
    for taint in taints:
        if taint.get("effect") not in ("NoSchedule", "NoExecute"):
            continue
        if not any((t.get("operator") == "Exists" and (not t.get("key") or t.get("key") == taint.get("key"))
                    or (t.get("key") == taint.get("key") and t.get("value", "") == taint.get("value", "")))
                   and (not t.get("effect") or t.get("effect") == taint.get("effect"))
                   for t in tolerations):
            return False
    return True


class DaemonSetController(_Controller):
    """DaemonSets → one pod per node whose labels match the template's ``nodeSelector`` and
    whose taints it tolerates (cordoned nodes included, as the DaemonSet controller's own
    ``node.kubernetes.io/unschedulable`` toleration allows): ``generateName: <set>-``, a
    ``nodeAffinity`` on ``metadata.name`` as the controller writes it, and ``spec.nodeName`` set
    at creation — the default scheduler's binding is not modelled, so the pod is bound at once
    and the server's ``bound_hooks`` (the kubelet) run for it. A node that no longer fits has its
    pod deleted (a node's change reconciles every DaemonSet); ``status`` counts desired, current
    and ready (Running) pods."""

    resource, owned = "daemonsets", "pods"

    def touched(self, changes: list, resync: bool) -> set[str]:
        keys = super().touched(changes, resync)
        if any(c.resource == "nodes" for c in changes):
            keys |= set(self.store.objects["daemonsets"])
        return keys

    def reconcile(self, key: str) -> None:
        ds = self.store.get("daemonsets", key)
        template_spec = ((ds.get("spec") or {}).get("template") or {}).get("spec") or {}
        selector = template_spec.get("nodeSelector") or {}
        tolerations = [*(template_spec.get("tolerations") or []),
                       {"key": "node.kubernetes.io/unschedulable", "operator": "Exists", "effect": "NoSchedule"}]
        with self.store.lock:
            nodes = [n for n in self.store.objects["nodes"].values()
                     if all(((n.get("metadata") or {}).get("labels") or {}).get(k) == v for k, v in selector.items())
                     and tolerates(tolerations, (n.get("spec") or {}).get("taints") or [])]
            eligible = {n["metadata"]["name"] for n in nodes}
        pods = [p for p in self.children(ds["metadata"]["uid"]) if _live(p)]
        placed = {(p.get("spec") or {}).get("nodeName") for p in pods}
        for node_name in sorted(eligible - placed):
            pod = _pod_from(ds)
            pod["spec"]["nodeName"] = node_name
            pod["spec"]["tolerations"] = tolerations
            pod["spec"]["affinity"] = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In",
                                                        "values": [node_name]}]}]}}}
            created = self.server.create_pod(pod)
            for hook in self.server.bound_hooks:
                hook(self.server, key_of(created), node_name)
        for p in pods:
            if (p.get("spec") or {}).get("nodeName") not in eligible:
                self.server.delete_pod(key_of(p))
        running = sum(1 for p in pods if (p.get("status") or {}).get("phase") == "Running")
        status = {"desiredNumberScheduled": len(eligible), "currentNumberScheduled": len(placed & eligible),
                  "numberReady": running, "numberAvailable": running}
        if {k: (ds.get("status") or {}).get(k) for k in status} != status:
            self.store.mutate("daemonsets", key, lambda o: o.__setitem__("status", {**(o.get("status") or {}),
                                                                                   **status}))
