"""Pods shaped as a real cluster's controllers make them, for the test API server and the lab.

Each function returns a core/v1 Pod dict as the controller writes it (API reference
workload-resources/pod-v1; the controllers' source for the names and labels):

* :func:`deployment_pod` — the ReplicaSet ``<deployment>-<pod-template-hash>`` is the controller
  (``apps/v1``), the pod is ``<replicaset>-<5 random characters>`` and carries the
  ``pod-template-hash`` label (the Deployment controller's);
* :func:`statefulset_pod` — ``<statefulset>-<ordinal>``, with ``controller-revision-hash``,
  ``statefulset.kubernetes.io/pod-name`` and ``apps.kubernetes.io/pod-index``;
* :func:`daemonset_pod` — ``<daemonset>-<5 characters>`` with ``controller-revision-hash`` and
  ``pod-template-generation``, pinned to its node by required node affinity on
  ``metadata.name`` (as the DaemonSet controller does since 1.12);
* :func:`job_pod` — ``<job>-<5 characters>``, ``batch/v1`` Job controller, ``job-name`` and
  ``controller-uid`` labels, ``restartPolicy: Never``;
* :func:`bare_pod` — no owner references.

Modelled: metadata (names, labels, owner references with ``controller`` and
``blockOwnerDeletion``, uids), one container with requests and limits, ``spec.nodeName`` and
``status.phase``/``status.startTime`` of a pod the kubelet runs. Not modelled: the controllers
themselves (no ReplicaSet, StatefulSet or Job objects are created), probes, volumes.
"""

from __future__ import annotations

import hashlib
from datetime import datetime, timezone


def _uid(text: str) -> str:
    digest = hashlib.sha256(text.encode()).hexdigest()
    return f"{digest[:8]}-{digest[8:12]}-{digest[12:16]}-{digest[16:20]}-{digest[20:32]}"


def rfc3339(unix_s: float) -> str:
    """Unix seconds → ``2026-12-02T06:00:00Z`` (the API's time format)."""
    return datetime.fromtimestamp(unix_s, tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _pod(namespace: str, name: str, node: str, *, cpu: str, memory: str, labels: dict, owner: dict | None,
         started_s: float | None, annotations: dict | None = None, restart: str = "Always",
         affinity: dict | None = None) -> dict:
    meta: dict = {"name": name, "namespace": namespace, "uid": _uid(f"{namespace}/{name}"), "labels": labels,
                  "creationTimestamp": rfc3339((started_s or 1_764_000_000.0) - 2.0)}
    if annotations:
        meta["annotations"] = annotations
    if owner is not None:
        meta["ownerReferences"] = [{**owner, "uid": _uid(f"{owner['kind']}/{namespace}/{owner['name']}"),
                                    "controller": True, "blockOwnerDeletion": True}]
    spec: dict = {"containers": [{"name": "main", "image": "busybox:1.36", "resources": {
        "requests": {"cpu": cpu, "memory": memory}, "limits": {"cpu": cpu, "memory": memory}}}],
        "restartPolicy": restart, "schedulerName": "default-scheduler", "terminationGracePeriodSeconds": 30}
    if affinity:
        spec["affinity"] = affinity
    status: dict = {"phase": "Pending"}
    if node:
        spec["nodeName"] = node
        status = {"phase": "Running", "startTime": rfc3339(started_s or 1_764_000_000.0)}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec, "status": status}


def deployment_pod(namespace: str, deployment: str, template_hash: str, suffix: str, node: str, *, cpu: str = "1",
                   memory: str = "1Gi", started_s: float | None = None, labels: dict | None = None,
                   annotations: dict | None = None) -> dict:
    """A Deployment's pod: ``<deployment>-<hash>-<suffix>`` owned by ReplicaSet ``<deployment>-<hash>``."""
    replicaset = f"{deployment}-{template_hash}"
    return _pod(namespace, f"{replicaset}-{suffix}", node, cpu=cpu, memory=memory, started_s=started_s,
                annotations=annotations,
                labels={"app": deployment, "pod-template-hash": template_hash, **(labels or {})},
                owner={"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": replicaset})


def statefulset_pod(namespace: str, statefulset: str, ordinal: int, node: str, *, cpu: str = "1",
                    memory: str = "1Gi", started_s: float | None = None, revision: str = "6d8f7c9b5") -> dict:
    """A StatefulSet's pod ``<statefulset>-<ordinal>``."""
    name = f"{statefulset}-{ordinal}"
    return _pod(namespace, name, node, cpu=cpu, memory=memory, started_s=started_s, labels={
        "app": statefulset, "controller-revision-hash": f"{statefulset}-{revision}",
        "statefulset.kubernetes.io/pod-name": name, "apps.kubernetes.io/pod-index": str(ordinal)},
        owner={"apiVersion": "apps/v1", "kind": "StatefulSet", "name": statefulset})


def daemonset_pod(namespace: str, daemonset: str, suffix: str, node: str, *, cpu: str = "100m",
                  memory: str = "128Mi", started_s: float | None = None) -> dict:
    """A DaemonSet's pod on ``node``."""
    affinity = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}]}}}
    return _pod(namespace, f"{daemonset}-{suffix}", node, cpu=cpu, memory=memory, started_s=started_s, labels={
        "app": daemonset, "controller-revision-hash": "5b9c8d7f6", "pod-template-generation": "1"},
        owner={"apiVersion": "apps/v1", "kind": "DaemonSet", "name": daemonset}, affinity=affinity)


def job_pod(namespace: str, job: str, suffix: str, node: str, *, cpu: str = "1", memory: str = "1Gi",
            started_s: float | None = None) -> dict:
    """A Job's pod ``<job>-<suffix>`` (service tier unless labelled: no Kalena tier label)."""
    uid = _uid(f"Job/{namespace}/{job}")
    return _pod(namespace, f"{job}-{suffix}", node, cpu=cpu, memory=memory, started_s=started_s, restart="Never",
                labels={"batch.kubernetes.io/controller-uid": uid, "batch.kubernetes.io/job-name": job,
                        "controller-uid": uid, "job-name": job},
                owner={"apiVersion": "batch/v1", "kind": "Job", "name": job})


def bare_pod(namespace: str, name: str, node: str, *, cpu: str = "1", memory: str = "1Gi",
             started_s: float | None = None, labels: dict | None = None, annotations: dict | None = None) -> dict:
    """A pod without owner references (``kubectl run``)."""
    return _pod(namespace, name, node, cpu=cpu, memory=memory, started_s=started_s,
                labels={"run": name, **(labels or {})}, owner=None, annotations=annotations)
