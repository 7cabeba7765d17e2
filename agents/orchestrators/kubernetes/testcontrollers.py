"""Controller doubles of the test API server: the Job controller (batch/v1), as
kube-controller-manager's ``job`` controller shapes what it writes (no HTTP here; the server
runs it on a thread, see :mod:`agents.orchestrators.kubernetes.testserver`).

What it models: a Job's defaulting (``spec.selector`` on ``controller-uid``, the template's
``controller-uid`` and ``job-name`` labels, ``parallelism``/``completions`` 1, ``backoffLimit``
6, ``status.startTime``); its pods, created from the template through the server's pod
admission with ``generateName: <job>-``, those labels and a controlling ``ownerReference``;
``min(parallelism, completions − succeeded)`` active pods, a replacement for each pod that
failed or was deleted before it succeeded; a failed or deleted pod counts toward
``status.failed`` unless a ``podFailurePolicy`` rule with ``action: Ignore`` matches a
condition it carried (``DisruptionTarget`` after an eviction); ``status.failed >
backoffLimit`` → condition ``Failed``/``BackoffLimitExceeded`` and no more pods; ``succeeded
≥ completions`` → condition ``Complete`` and ``completionTime``.

What it does not model: indexed completion, ``activeDeadlineSeconds``, ``ttlSecondsAfterFinished``,
backoff delays between replacements, suspend, pod-tracking finalizers, exit-code rules of a
``podFailurePolicy`` (``onExitCodes``), ``FailJob``/``Count`` actions (only ``Ignore`` changes
the count), deleting a Job's pods when the Job is deleted (no garbage collector).
"""

from __future__ import annotations

import copy
import threading
from collections.abc import Mapping
from typing import TYPE_CHECKING

from agents.orchestrators.kubernetes.teststore import APIError, key_of, now_rfc3339

if TYPE_CHECKING:
    from agents.orchestrators.kubernetes.testserver import TestAPIServer


def _controller_uid(obj: Mapping) -> str:
    for ref in (obj.get("metadata") or {}).get("ownerReferences") or []:
        if ref.get("controller") and ref.get("kind") == "Job":
            return str(ref.get("uid") or "")
    return ""


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


class JobController:
    """Follows the store's change log on a thread and reconciles the Jobs a change touches."""

    def __init__(self, server: TestAPIServer) -> None:
        self.server = server
        self.store = server.store
        #: pod uids already counted as failed or succeeded (a pod counts once)
        self._counted: set[str] = set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="kube-test-job-controller", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        with self.store.lock:
            self.store.changed.notify_all()
        self._thread.join(timeout=5.0)

    def _run(self) -> None:
        seen_rv = self.store.rv
        while not self._stop.is_set():
            with self.store.lock:
                changes = self.store.changes_after(seen_rv)
                if not changes:
                    self.store.wait(1.0)
                    continue
                resync = seen_rv < self.store.compacted_rv
                seen_rv = changes[-1].rv
                jobs = {uid: key for key, uid in ((k, j["metadata"]["uid"])
                                                  for k, j in self.store.objects["jobs"].items())}
                touched: set[str] = set(jobs.values()) if resync else set()
                for c in changes:
                    if c.resource == "jobs" and c.type != "DELETED":
                        touched.add(key_of(c.obj))
                    elif c.resource == "pods" and (uid := _controller_uid(c.obj)) in jobs:
                        touched.add(jobs[uid])
                        phase = (c.obj.get("status") or {}).get("phase")
                        if c.type == "DELETED" or phase in ("Failed", "Succeeded"):
                            self._count(jobs[uid], c.obj, "Succeeded" if phase == "Succeeded" else "Failed")
            for key in sorted(touched):
                try:
                    self.reconcile(key)
                except APIError:  # the Job was deleted meanwhile, or admission refused its pod
                    continue

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
        uid = job["metadata"]["uid"]
        with self.store.lock:
            owned = [p for p in self.store.objects["pods"].values() if _controller_uid(p) == uid]
            active = sum(1 for p in owned if (p.get("status") or {}).get("phase") not in ("Succeeded", "Failed")
                         and not p["metadata"].get("deletionTimestamp"))
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
    """A pod of ``job`` as the Job controller creates it (``GetPodFromTemplate``)."""
    template = copy.deepcopy((job.get("spec") or {}).get("template") or {})
    meta = template.get("metadata") or {}
    name, namespace = job["metadata"]["name"], job["metadata"]["namespace"]
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"generateName": f"{name}-", "namespace": namespace, "labels": meta.get("labels") or {},
                         "annotations": meta.get("annotations") or {},
                         "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": name,
                                              "uid": job["metadata"]["uid"], "controller": True,
                                              "blockOwnerDeletion": True}]},
            "spec": template.get("spec") or {}, "status": {"phase": "Pending"}}
