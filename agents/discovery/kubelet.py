"""Kubernetes pod discovery through the node's kubelet (``GET /pods``, a ``v1.PodList``).

Per pod (fields of ``core/v1`` ``Pod``):

* skipped when ``status.phase`` is ``Succeeded`` or ``Failed`` — terminated workloads never
  count (case C3); ``Pending`` pods count at their request (in flight, docs/design.md §6);
* identity ``metadata.namespace/metadata.name``; ``metadata.deletionTimestamp`` set → terminating
  (credited, never chosen again — case C4);
* tier from ``metadata.labels``, priority and switches from ``metadata.annotations``;
  ``ownerReferences`` kind ``DaemonSet`` → tier daemonset; kind ``Job`` → batch when inference
  is on and no tier label is set;
* requests/limits: the Kubernetes effective pod rule — ``max(Σ containers, max(initContainers))``
  per resource, plus ``spec.overhead``; a limit is declared only if every container declares it;
  a batch pod converted by Kalena's admission webhook (docs/design.md §14) has no cpu/memory left — its
  real cpu/memory request and limit come from the ``kalena.naughtian.io/resources`` annotation
  (a ``null`` limit = none declared), and those are what the enforcer writes (the kubelet sees
  the pod as BestEffort and enforces nothing);
* grace ``spec.terminationGracePeriodSeconds`` (default 30); start ``status.startTime``;
* cgroup from ``metadata.uid`` and ``status.qosClass`` for the kubelet's cgroup driver:
  cgroupfs ``kubepods[/burstable|/besteffort]/pod<uid>``; systemd
  ``kubepods.slice[/kubepods-burstable.slice]/kubepods[-burstable]-pod<uid_>.slice``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import httpx
import numpy as np

from agents.collectors.kubelet import KubeletClient
from agents.discovery.base import Discovery
from agents.discovery.labels import classify
from agents.errors import DiscoveryError, TelemetryError
from agents.model import KIND_KUBERNETES, Workload
from agents.orchestrators.kubernetes.batch_resources import QuantityError, read_annotation
from agents.units import k8s_resources_vector, unix_s_from_rfc3339
from kalena_engine.resources import CPU, RAM, zeros

CGROUP_DRIVERS = ("cgroupfs", "systemd")
QOS_CLASSES = ("Guaranteed", "Burstable", "BestEffort")


def pod_cgroup(uid: str, qos_class: str, *, driver: str = "cgroupfs", root: str = "kubepods") -> str:
    """The pod-level cgroup (relative path) the kubelet creates.

    ``pod_cgroup("1234-ab", "Burstable")`` → ``"kubepods/burstable/pod1234-ab"``;
    with ``driver="systemd"`` → ``"kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1234_ab.slice"``.
    """
    if qos_class not in QOS_CLASSES:
        raise DiscoveryError(f"unknown QoS class {qos_class!r}", source=f"pod {uid}", field="status.qosClass",
                             accepted=", ".join(QOS_CLASSES))
    if driver == "systemd":
        base = root if root.endswith(".slice") else f"{root}.slice"
        stem = base[: -len(".slice")]
        escaped = uid.replace("-", "_")
        if qos_class == "Guaranteed":
            return f"{base}/{stem}-pod{escaped}.slice"
        tier = qos_class.lower()
        return f"{base}/{stem}-{tier}.slice/{stem}-{tier}-pod{escaped}.slice"
    if qos_class == "Guaranteed":
        return f"{root}/pod{uid}"
    return f"{root}/{qos_class.lower()}/pod{uid}"


def _container_resources(containers: Any, key: str, *, source: str, field: str) -> list[np.ndarray]:
    out = []
    if containers is None:
        return out
    if not isinstance(containers, list):
        raise DiscoveryError("expected a list of containers", source=source, field=field)
    for i, container in enumerate(containers):
        resources = (container or {}).get("resources") or {}
        out.append(k8s_resources_vector(resources.get(key), source=source, field=f"{field}[{i}].resources.{key}",
                                        missing=math.inf if key == "limits" else 0.0))
    return out


def pod_resources(spec: Mapping[str, Any], *, source: str) -> tuple[np.ndarray, np.ndarray]:
    """Effective pod ``(request, limit)`` vectors (see module docstring)."""
    result = []
    for key in ("requests", "limits"):
        app = _container_resources(spec.get("containers"), key, source=source, field="spec.containers")
        init = _container_resources(spec.get("initContainers"), key, source=source, field="spec.initContainers")
        total = np.sum(app, axis=0) if app else (zeros() + (math.inf if key == "limits" else 0.0))
        if init:
            total = np.maximum(total, np.max(init, axis=0))
        overhead = k8s_resources_vector(spec.get("overhead"), source=source, field="spec.overhead")
        result.append(total + overhead)
    return result[0], result[1]


def parse_pod_list(doc: Any, *, source: str, driver: str = "cgroupfs", cgroup_root: str = "kubepods",
                   infer_jobs: bool = False) -> Discovery:
    """A ``PodList`` document → :class:`~agents.discovery.base.Discovery`.

    Raises:
        TelemetryError: the document is not a PodList (no ``items`` list). Problems in one pod
            are reported in ``errors`` and leave only that pod out.
    """
    if not isinstance(doc, Mapping) or not isinstance(doc.get("items"), list):
        raise TelemetryError("expected a PodList with an 'items' list", source=source, field="items")
    out = Discovery()
    for i, pod in enumerate(doc["items"]):
        meta = (pod or {}).get("metadata") or {}
        spec = (pod or {}).get("spec") or {}
        status = (pod or {}).get("status") or {}
        key = f"{meta.get('namespace', '?')}/{meta.get('name', f'items[{i}]')}"
        where = f"kubelet:{key}"
        phase = status.get("phase", "Pending")
        if phase in ("Succeeded", "Failed"):
            continue
        try:
            uid = meta.get("uid")
            if not isinstance(uid, str) or not uid:
                raise DiscoveryError("missing", source=where, field="metadata.uid")
            owners = [o.get("kind") for o in meta.get("ownerReferences") or [] if isinstance(o, Mapping)]
            errors: list[str] = []
            kind = classify(meta.get("labels"), meta.get("annotations"), source=where,
                            daemonset="DaemonSet" in owners, job_owned="Job" in owners,
                            infer_jobs=infer_jobs, errors=errors)
            out.errors.extend(errors)
            request, limit = pod_resources(spec, source=where)
            try:
                converted = read_annotation(meta.get("annotations"))
            except QuantityError as exc:
                raise DiscoveryError(str(exc).split(": ", 1)[1], source=where, field=exc.field) from None
            if converted is not None:  # the pod's real cpu/memory (the webhook moved them out)
                request[CPU], request[RAM] = converted.request_mcpu, converted.request_bytes
                limit[CPU] = math.inf if converted.limit_mcpu is None else converted.limit_mcpu
                limit[RAM] = math.inf if converted.limit_bytes is None else converted.limit_bytes
            started = status.get("startTime")
            start = unix_s_from_rfc3339(started, source=where, field="status.startTime") if started else math.nan
            grace = spec.get("terminationGracePeriodSeconds", 30)
            if isinstance(grace, bool) or not isinstance(grace, int | float) or grace < 0:
                raise DiscoveryError(f"{grace!r} is not a number of seconds ≥ 0", source=where,
                                     field="spec.terminationGracePeriodSeconds")
            qos = status.get("qosClass") or "BestEffort"
            out.workloads.append(Workload(
                id=key, name=key, kind=KIND_KUBERNETES, tier=kind.tier, priority=kind.priority,
                request=request, limit=limit, start_s=start, grace_s=float(grace),
                cgroup=pod_cgroup(uid, qos, driver=driver, root=cgroup_root),
                slack_cpu=kind.slack_cpu, slack_memory=kind.slack_memory, reclaim_disabled=kind.reclaim_disabled,
                startup_grace_s=kind.startup_grace_s,
                terminating=bool(meta.get("deletionTimestamp")), runtime_ref=key, source="kubelet",
                labels={str(k): str(v) for k, v in (meta.get("labels") or {}).items()},
            ))
        except (DiscoveryError, TelemetryError) as exc:
            out.errors.append(str(exc))
    return out


class KubeletSource:
    """Discovery of the pods on this node from its kubelet.

    Args:
        client: :class:`~agents.collectors.kubelet.KubeletClient`.
        driver: the kubelet's cgroup driver, ``cgroupfs`` or ``systemd``.
        cgroup_root: the kubelet's ``--cgroup-root`` pod parent (``kubepods``).
        infer_jobs: Job/CronJob pods without a tier label are batch.
    """

    name = "kubelet"

    def __init__(self, client: KubeletClient, *, driver: str = "cgroupfs", cgroup_root: str = "kubepods",
                 infer_jobs: bool = False) -> None:
        self.client = client
        self.driver = driver
        self.cgroup_root = cgroup_root
        self.infer_jobs = infer_jobs
        self._start: dict[str, float] = {}

    def discover(self, now_s: float) -> Discovery:
        url = self.client.base_url + "/pods"
        try:
            doc = self.client.get_json("/pods")
            result = parse_pod_list(doc, source=url, driver=self.driver, cgroup_root=self.cgroup_root,
                                    infer_jobs=self.infer_jobs)
        except (httpx.HTTPError, TelemetryError) as exc:
            return Discovery([], [f"{url}: {exc}"], complete=False)
        fixed = []
        for workload in result.workloads:
            if math.isnan(workload.start_s):  # pending pod: not started yet, count it from now
                start = self._start.setdefault(workload.id, now_s)
                workload = Workload(**{**workload.__dict__, "start_s": start})
            fixed.append(workload)
        result.workloads = fixed
        return result
