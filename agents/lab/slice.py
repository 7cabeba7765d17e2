"""The lab's cluster, rendered from real inputs: a Kuberina blueprint slice as a real cluster holds
it, with usage from real series and batch from a real trace (docs/lab.md "The slice").

:func:`render_slice` reads the inputs, asks :mod:`kalena_engine.labslice` for the numbers and
renders them as files (:class:`RenderedSlice`); :func:`write_slice` writes them (all or nothing).

Contracts the kubelet double and the Docker/Swarm lab modes read — kept exactly:

* ``lab.kalena.naughtian.io/usage`` on every production pod template (and DaemonSet), JSON
  ``{"step_s": float, "cpu_m": [int…], "memory_mib": [int…], "repeat": true}``: hold ``cpu_m[i]``
  millicores busy and ``memory_mib[i]`` MiB resident during step ``i`` of ``step_s`` wall
  seconds, then start over.
* ``lab.kalena.naughtian.io/work`` on every batch pod template, JSON ``{"cpu_m": int,
  "memory_mib": int, "duration_s": float}``: burn that cpu and hold that memory for that long,
  then exit 0.
* Batch pods carry the label ``kalena.naughtian.io/tier: batch`` (the admission webhook's
  objectSelector); gangs the annotations ``kalena.naughtian.io/gang`` and ``…/min-member``.

Files (under the output folder): ``kubernetes/production.yaml`` (Namespaces, headless Services,
DaemonSets, Deployments, StatefulSets, bare Pods), ``kubernetes/batch/NNNN-<name>.yaml`` (one
arrival each), ``batch-schedule.json`` (arrival offsets), ``docker/production.json`` and
``docker/batch.json`` (container specs), ``ir/{infra,workloads,blueprint}.yaml`` (importable by
``kalena cluster import``), ``placement.json`` (the blueprint's node for every pod and the lab
nodes' labels), ``summary.json`` and ``summary.txt``.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import yaml

from kalena_engine.errors import InputError, InvariantViolation
from kalena_engine.kuberina import load_blueprint, load_infrastructure, load_workloads, phase0_capacity
from kalena_engine.kuberina.blueprint import parse_blueprint
from kalena_engine.kuberina.infra import parse_infrastructure
from kalena_engine.kuberina.workloads import parse_workloads
from kalena_engine.labslice import (
    BatchSample, LabShape, ProductionSlice, SliceUsage, by_template, lab_slack, sample_batch, slice_ir_documents,
    slice_production, slice_usage, template_rows,
)
from kalena_engine.labslice.batch import BARE_POD as BATCH_POD, GANG
from kalena_engine.labslice.production import BARE_POD, DEPLOYMENT, STATEFULSET
from kalena_engine.traces.alibaba import read_batch_task
from kalena_engine.traces.bitbrains import load_bitbrains
from kalena_engine.traces.google import production_peak_ratios, read_task_events, read_task_usage

USAGE_ANNOTATION = "lab.kalena.naughtian.io/usage"
WORK_ANNOTATION = "lab.kalena.naughtian.io/work"
TIER_LABEL = "kalena.naughtian.io/tier"
GANG_ANNOTATION = "kalena.naughtian.io/gang"
MIN_MEMBER_ANNOTATION = "kalena.naughtian.io/min-member"
WORKLOAD_LABEL = "kalena.naughtian.io/workload"
DAEMONSET_LABEL = "kalena.naughtian.io/daemonset"
SLICE_LABEL = "lab.kalena.naughtian.io/slice"
HOSTNAME = "kubernetes.io/hostname"
ZONE = "topology.kubernetes.io/zone"
RACK = "kuberina.io/rack"
IMAGE = "kalena/busybox:test"
BATCH_NAMESPACE = "batch"
#: Kubernetes' default termination grace (s), divided by the speed in the lab.
DEFAULT_GRACE_S = 30

#: Input files, relative to the data folder, and the flag that names each.
DEFAULT_INPUTS = {
    "infra": ("kuberina/irina-186-3d/irina_infra.yaml", "--infra"),
    "workloads": ("kuberina/irina-186-3d/irina_workloads.yaml", "--ir"),
    "blueprint": ("kuberina/irina-186-3d/kuberina_solution.yaml", "--blueprint"),
    "usage_dir": ("traces/bitbrains-rnd-2013-7", "--usage-dir"),
    "batch_trace": ("traces/alibaba-2018/batch_task-first50000.csv.gz", "--batch-trace"),
    "google_events": ("traces/google-2011/task_events-part-00000-of-00500.csv.gz", "--google-events"),
    "google_usage": ("traces/google-2011/task_usage-part-00000-first10000.csv.gz", "--google-usage"),
}


@dataclass(frozen=True)
class SliceConfig:
    """How to cut the slice. Lab: ``nodes`` × ``cpu_m`` / ``memory_mib`` named ``<lab_name>-i``.
    Time: ``hours`` of trace time from ``usage_offset_s`` (Bitbrains, after its earliest start)
    and ``batch_offset_s`` (batch trace), in steps of ``step_s``, compressed ``speed`` times.
    Batch: ``load_factor`` over the slack, wall durations floored at ``min_wall_s``, at most
    ``max_batch_pods`` pods expected (a pod at most a quarter of a node). ``limit_ratio``: the
    pods' limits, ``L = limit_ratio · q`` (Irina declares none)."""

    nodes: int = 4
    cpu_m: int = 250
    memory_mib: int = 256
    lab_name: str = "lab"
    speed: float = 10.0
    seed: int = 0
    load_factor: float = 1.0
    hours: float = 6.0
    step_s: float = 60.0
    usage_offset_s: float = 0.0
    batch_offset_s: float = 86_400.0
    min_wall_s: float = 10.0
    max_pods_per_node: int = 16
    max_batch_pods: int = 300
    limit_ratio: float = 1.0
    gang_share: float = 0.25
    bare_share: float = 0.25


@dataclass(frozen=True, eq=False)
class RenderedSlice:
    """What :func:`render_slice` made: ``files`` (relative path → text) and the parts behind them."""

    files: dict[str, str]
    production: ProductionSlice
    usage: SliceUsage
    batch: BatchSample
    summary: dict
    ir: tuple = ()


def resolve_inputs(data_root: Path, overrides: dict[str, str | Path | None]) -> dict[str, Path]:
    """Each input's path (an override, else the default under ``data_root``).

    Raises:
        InputError: a file (or the usage folder) does not exist — names it and its flag.
    """
    out: dict[str, Path] = {}
    for key, (default, flag) in DEFAULT_INPUTS.items():
        given = overrides.get(key)
        path = Path(given) if given else data_root / default
        if not path.is_absolute() and given:
            path = data_root / path if not path.exists() else path
        exists = path.is_dir() if key == "usage_dir" else path.is_file()
        if not exists:
            raise InputError("no such " + ("folder" if key == "usage_dir" else "file"), source=str(path), field=flag,
                             accepted=f"an existing path ({flag}; default {default} under the data folder)")
        out[key] = path
    return out


def render_slice(config: SliceConfig, inputs: dict[str, Path]) -> RenderedSlice:
    """Read ``inputs`` (see :func:`resolve_inputs`), cut the slice and render every file.

    Raises:
        InputError (IRError, TraceError, BlueprintRefused): bad inputs or a slice that does not
            fit (the message names the file or flag); nothing is written.
    """
    shape = LabShape(nodes=config.nodes, cpu_m=config.cpu_m, memory_mib=config.memory_mib, name=config.lab_name)
    infra = load_infrastructure(inputs["infra"])
    workloads = load_workloads(inputs["workloads"])
    blueprint = load_blueprint(inputs["blueprint"], workloads)
    prod = slice_production(infra, workloads, blueprint, shape, seed=config.seed,
                            max_pods_per_node=config.max_pods_per_node)
    ir = slice_ir_documents(prod, source=str(inputs["blueprint"]))
    s_infra = parse_infrastructure(ir[0], source="ir/infra.yaml")
    s_workloads = parse_workloads(ir[1], source="ir/workloads.yaml")
    s_blueprint = parse_blueprint(ir[2], s_workloads, source="ir/blueprint.yaml")
    events = read_task_events(inputs["google_events"])
    ratios = production_peak_ratios(events, read_task_usage(inputs["google_usage"])).ratios
    usage = slice_usage(s_workloads.requests, load_bitbrains(inputs["usage_dir"]), ratios, hours=config.hours,
                        step_s=config.step_s, seed=config.seed, speed=config.speed,
                        usage_offset_s=config.usage_offset_s, limit_ratio=config.limit_ratio)
    capacity = phase0_capacity(s_infra)
    if [p.id for p in s_workloads.pods] != [p.id for p in prod.pods]:
        raise InvariantViolation("the slice's IR lists its pods in another order than the slice")
    pod_nodes = [s_infra.node_index[s_blueprint.assignment[p.id]] for p in s_workloads.pods]
    # a template is one for all replicas: every pod of a declaration follows its replica 0's series
    lab_usage = by_template(usage, template_rows([f"{p.namespace}/{p.declaration}" for p in s_workloads.pods]))
    slack, slack_m_s = lab_slack(lab_usage, pod_nodes, capacity[:, 0])
    batch = sample_batch(read_batch_task(inputs["batch_trace"]), slack_m_s=slack_m_s, load_factor=config.load_factor,
                         speed=config.speed, hours=config.hours, offset_s=config.batch_offset_s,
                         cpu_scale=prod.cpu_scale, memory_scale=prod.memory_scale, min_wall_s=config.min_wall_s,
                         max_pod_cpu_m=max(1, config.cpu_m // 4), max_pod_memory_mib=max(1, config.memory_mib // 4),
                         max_pods=config.max_batch_pods, seed=config.seed, gang_share=config.gang_share,
                         bare_share=config.bare_share)
    grace = max(1, math.ceil(DEFAULT_GRACE_S / config.speed))
    series = {p.id: _usage_json(lab_usage, i) for i, p in enumerate(prod.pods)}
    files: dict[str, str] = {}
    files["kubernetes/production.yaml"] = _yaml_all(production_manifests(prod, series, config, grace))
    schedule = []
    for k, group in enumerate(batch.groups, start=1):
        path = f"kubernetes/batch/{k:04d}-{group.name}.yaml"
        files[path] = _yaml_all([batch_manifest(group, config, grace)])
        schedule.append({"at_s": round(group.arrival_s, 3), "file": path, "kind": group.kind, "name": group.name,
                         "namespace": BATCH_NAMESPACE, "pods": group.pods, "cpu_m": group.cpu_m,
                         "memory_mib": group.memory_mib, "duration_s": group.duration_s,
                         "task": group.task_id, "instances_per_pod": group.instances,
                         "trace_arrival_s": group.trace_arrival_s,
                         "trace_duration_s": group.trace_duration_s})
    files["batch-schedule.json"] = _json({"speed": config.speed, "load_factor": config.load_factor,
                                          "arrivals": schedule})
    files["docker/production.json"] = _json(docker_production(prod, series, config))
    files["docker/batch.json"] = _json(docker_batch(batch, config, grace))
    for name, doc in zip(("infra", "workloads", "blueprint"), ir, strict=True):
        files[f"ir/{name}.yaml"] = yaml.dump(doc, Dumper=_PlainDumper, sort_keys=False)
    files["placement.json"] = _json(placement(prod, lab_usage))
    summary = slice_summary(config, inputs, prod, lab_usage, usage, batch, slack, capacity[:, 0])
    # memory, reported beside cpu: what production's series leave of each node's memory over the run
    mem_used = np.zeros((len(capacity), lab_usage.memory_mib.shape[1]))
    np.add.at(mem_used, np.asarray(pod_nodes, dtype=np.int64), lab_usage.memory_mib)
    mem_slack = float(np.maximum(0.0, capacity[:, 1, None] / 2**20 - mem_used).sum() * lab_usage.step_wall_s)
    mem_demand = float(sum(g.pods * g.memory_mib * g.duration_s for g in batch.groups))
    summary["slack"]["memory_mib_s"] = mem_slack
    summary["batch"]["memory_demand_mib_s"] = mem_demand
    summary["batch"]["memory_load_factor"] = mem_demand / mem_slack if mem_slack > 0 else 0.0
    files["summary.json"] = _json(summary)
    files["summary.txt"] = summary_text(summary)
    return RenderedSlice(files=files, production=prod, usage=lab_usage, batch=batch, summary=summary, ir=ir)


def write_slice(rendered: RenderedSlice, out_dir: Path) -> None:
    """Write every file under ``out_dir`` (made if missing): into a temporary folder beside it,
    then moved into place, so a failure leaves nothing half-written.

    Raises:
        InputError: ``out_dir`` exists and is not an empty folder (a slice is never mixed into
            another one).
    """
    out_dir = Path(out_dir)
    if out_dir.exists() and (not out_dir.is_dir() or any(out_dir.iterdir())):
        raise InputError("exists and is not an empty folder", source=str(out_dir), field="--out",
                         accepted="a new or empty folder")
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".slice-", dir=out_dir.parent))
    try:
        for rel, text in rendered.files.items():
            path = tmp / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
        if out_dir.exists():
            out_dir.rmdir()
        os.replace(tmp, out_dir)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


# -- Kubernetes ---------------------------------------------------------------------------------

def _usage_json(usage: SliceUsage, row: int) -> str:
    return json.dumps({"step_s": usage.step_wall_s, "cpu_m": usage.cpu_m[row].tolist(),
                       "memory_mib": usage.memory_mib[row].tolist(), "repeat": True}, separators=(",", ":"))


#: the smallest memory limit a container runtime accepts is 6 MB (runc refuses less, and the pod
#: never starts): a limit the scaling makes smaller is raised to this many MiB (the request stays
#: the scaled one, so such a pod is Burstable)
MIN_MEMORY_LIMIT_MIB = 8


def _resources(cpu_m: int, memory_mib: int, limit_ratio: float) -> dict:
    return {"requests": {"cpu": f"{cpu_m}m", "memory": f"{memory_mib}Mi"},
            "limits": {"cpu": f"{max(cpu_m, round(cpu_m * limit_ratio))}m",
                       "memory": f"{max(memory_mib, round(memory_mib * limit_ratio), MIN_MEMORY_LIMIT_MIB)}Mi"}}


def _pod_affinity(prod: ProductionSlice, targets: tuple[str, ...], own_ns: str) -> list[dict]:
    """Preferred (soft, as Kuberina's are) same-node terms selecting the targets' declarations."""
    by_ns: dict[str, set[str]] = {}
    decl_of = {p.id: p.declaration for p in prod.pods}
    for t in targets:
        by_ns.setdefault(t.split("/", 1)[0], set()).add(decl_of[t])
    return [{"weight": 100, "podAffinityTerm": {
        "labelSelector": {"matchExpressions": [{"key": "app", "operator": "In", "values": sorted(names)}]},
        **({"namespaces": [ns]} if ns != own_ns else {}), "topologyKey": HOSTNAME}}
        for ns, names in sorted(by_ns.items())]


def pod_spec(prod: ProductionSlice, decl, config: SliceConfig, grace: int) -> dict:
    """The pod spec of a production declaration: IR nodeSelector and tolerations, pinned to the
    lab nodes the blueprint chose (``nodeSelector`` on the hostname when one node, a required
    node affinity when several), IR affinity / anti-affinity as preferred pod (anti-)affinity,
    topology spread as ``ScheduleAnyway``, requests and limits scaled."""
    spec: dict = {"terminationGracePeriodSeconds": grace}
    selector = dict(decl.node_selector)
    nodes = decl.nodes
    if len(nodes) == 1:
        selector[HOSTNAME] = nodes[0]
    if selector:
        spec["nodeSelector"] = selector
    affinity: dict = {}
    if len(nodes) > 1:
        affinity["nodeAffinity"] = {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": HOSTNAME, "operator": "In", "values": list(nodes)}]}]}}
    if decl.affinity:
        affinity["podAffinity"] = {"preferredDuringSchedulingIgnoredDuringExecution":
                                   _pod_affinity(prod, decl.affinity, decl.namespace)}
    if decl.anti_affinity:
        affinity["podAntiAffinity"] = {"preferredDuringSchedulingIgnoredDuringExecution":
                                       _pod_affinity(prod, decl.anti_affinity, decl.namespace)}
    if affinity:
        spec["affinity"] = affinity
    if decl.topology_spread is not None:
        spec["topologySpreadConstraints"] = [{
            "maxSkew": decl.topology_spread.max_skew,
            "topologyKey": ZONE if decl.topology_spread.topology_key == "zone" else RACK,
            "whenUnsatisfiable": "ScheduleAnyway", "labelSelector": {"matchLabels": {"app": decl.name}}}]
    if decl.tolerations:
        spec["tolerations"] = [{"key": t.key, "operator": t.operator, **({"value": t.value} if t.value else {}),
                                **({"effect": t.effect} if t.effect else {})} for t in decl.tolerations]
    spec["containers"] = [{"name": decl.name[:63], "image": IMAGE, "imagePullPolicy": "Never",
                           "resources": _resources(decl.cpu_m, decl.memory_mib, config.limit_ratio)}]
    return spec


def production_manifests(prod: ProductionSlice, series: dict[str, str], config: SliceConfig, grace: int) -> list[dict]:
    """Namespaces, headless Services (one per StatefulSet), DaemonSets (``kube-system``),
    Deployments, StatefulSets (``Parallel``) and bare Pods, in that order."""
    out: list[dict] = [{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}
                       for ns in sorted({d.namespace for d in prod.declarations} | {BATCH_NAMESPACE})]
    for ds in prod.daemonsets:
        labels = {"app": ds.name, SLICE_LABEL: config.lab_name}
        constant = json.dumps({"step_s": config.step_s / config.speed, "cpu_m": [ds.cpu_m],
                               "memory_mib": [ds.memory_mib], "repeat": True}, separators=(",", ":"))
        spec: dict = {"terminationGracePeriodSeconds": grace,
                      "containers": [{"name": ds.name, "image": IMAGE, "imagePullPolicy": "Never",
                                      "resources": _resources(ds.cpu_m, ds.memory_mib, 1.0)}]}
        if ds.node_selector:
            spec["nodeSelector"] = dict(ds.node_selector)
        if not ds.tolerations:   # Kuberina: an empty list tolerates every taint
            spec["tolerations"] = [{"operator": "Exists"}]
        else:
            spec["tolerations"] = [{"key": key, "operator": "Exists"} for key in ds.tolerations]
        out.append({"apiVersion": "apps/v1", "kind": "DaemonSet",
                    "metadata": {"name": ds.name, "namespace": "kube-system", "labels": labels},
                    "spec": {"selector": {"matchLabels": {"app": ds.name}},
                             "template": {"metadata": {"labels": labels, "annotations": {USAGE_ANNOTATION: constant}},
                                          "spec": spec}}})
    order = {STATEFULSET: 0, DEPLOYMENT: 1, BARE_POD: 2}
    for decl in prod.declarations:
        if decl.kind == STATEFULSET:
            out.append({"apiVersion": "v1", "kind": "Service",
                        "metadata": {"name": decl.name, "namespace": decl.namespace,
                                     "labels": {"app": decl.name, SLICE_LABEL: config.lab_name}},
                        "spec": {"clusterIP": "None", "selector": {"app": decl.name},
                                 "ports": [{"name": "peer", "port": 7000}]}})
    for decl in sorted(prod.declarations, key=lambda d: order[d.kind]):
        labels = {"app": decl.name, TIER_LABEL: "service", SLICE_LABEL: config.lab_name}
        meta = {"labels": labels, "annotations": {USAGE_ANNOTATION: series[decl.pods[0].id]}}
        spec = pod_spec(prod, decl, config, grace)
        if decl.kind == BARE_POD:
            out.append({"apiVersion": "v1", "kind": "Pod",
                        "metadata": {"name": decl.pods[0].name, "namespace": decl.namespace, **meta}, "spec": spec})
            continue
        body: dict = {"replicas": len(decl.pods), "selector": {"matchLabels": {"app": decl.name}},
                      "template": {"metadata": meta, "spec": spec}}
        if decl.kind == STATEFULSET:
            body = {"serviceName": decl.name, "podManagementPolicy": "Parallel", **body}
        out.append({"apiVersion": "apps/v1", "kind": decl.kind,
                    "metadata": {"name": decl.name, "namespace": decl.namespace,
                                 "labels": {"app": decl.name, SLICE_LABEL: config.lab_name}}, "spec": body})
    return out


def batch_manifest(group, config: SliceConfig, grace: int) -> dict:
    """A Job (``parallelism = completions =`` its pods; a gang's pods carry the gang
    annotations) or a bare Pod, batch-tier, with the work annotation."""
    labels = {TIER_LABEL: "batch", "app": group.name, SLICE_LABEL: config.lab_name}
    annotations = {WORK_ANNOTATION: json.dumps({"cpu_m": group.cpu_m, "memory_mib": group.memory_mib,
                                                "duration_s": group.duration_s}, separators=(",", ":"))}
    if group.kind == GANG:
        annotations[GANG_ANNOTATION] = group.name
        annotations[MIN_MEMBER_ANNOTATION] = str(group.pods)
    spec = {"restartPolicy": "Never", "terminationGracePeriodSeconds": grace,
            "containers": [{"name": "work", "image": IMAGE, "imagePullPolicy": "Never",
                            "resources": _resources(group.cpu_m, group.memory_mib, 1.0)}]}
    if group.kind == BATCH_POD:
        return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": group.name, "namespace": BATCH_NAMESPACE,
                                                                 "labels": labels, "annotations": annotations},
                "spec": spec}
    return {"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": group.name, "namespace": BATCH_NAMESPACE, "labels": dict(labels)},
            "spec": {"parallelism": group.pods, "completions": group.pods, "backoffLimit": 6,
                     "template": {"metadata": {"labels": labels, "annotations": annotations}, "spec": spec}}}


# -- Docker / Swarm ------------------------------------------------------------------------------

def docker_production(prod: ProductionSlice, series: dict[str, str], config: SliceConfig) -> list[dict]:
    """One container spec per production pod and per DaemonSet × node: ``name``, ``node`` (lab
    node), ``image``, ``labels`` (Kalena's: workload = the slice pod id, tier, request; the
    usage annotation as a label), ``nano_cpus`` / ``mem_limit`` (the limit), ``cpu_shares`` and
    ``mem_reservation`` (the request)."""
    out = []
    for lab, _ in prod.node_map:
        for ds in prod.daemonsets:
            constant = json.dumps({"step_s": config.step_s / config.speed, "cpu_m": [ds.cpu_m],
                                   "memory_mib": [ds.memory_mib], "repeat": True}, separators=(",", ":"))
            out.append(_container(f"{ds.name}-{lab}", lab, ds.cpu_m, ds.memory_mib, 1.0, {
                DAEMONSET_LABEL: "true", WORKLOAD_LABEL: f"kube-system/{ds.name}-{lab}", USAGE_ANNOTATION: constant}))
    for decl in prod.declarations:
        for pod in decl.pods:
            out.append(_container(f"{pod.namespace}-{pod.name}", pod.node, decl.cpu_m, decl.memory_mib,
                                  config.limit_ratio, {TIER_LABEL: "service", WORKLOAD_LABEL: pod.id,
                                                       USAGE_ANNOTATION: series[decl.pods[0].id]}))
    return out


def docker_batch(batch: BatchSample, config: SliceConfig, grace: int) -> list[dict]:
    """Batch to submit (``kalena batch submit`` / REST): per arrival ``at_s``, its pods' refs
    (``batch/<name>-<i>``), request (``cpu_m``, ``memory_mib``), gang, and the work label."""
    out = []
    for g in batch.groups:
        work = json.dumps({"cpu_m": g.cpu_m, "memory_mib": g.memory_mib, "duration_s": g.duration_s},
                          separators=(",", ":"))
        refs = [f"{BATCH_NAMESPACE}/{g.name}"] if g.pods == 1 else [f"{BATCH_NAMESPACE}/{g.name}-{i}"
                                                                    for i in range(g.pods)]
        out.append({"at_s": round(g.arrival_s, 3), "refs": refs, "owner": f"{BATCH_NAMESPACE}/{g.name}",
                    "cpu_m": g.cpu_m, "memory_mib": g.memory_mib, "image": IMAGE, "grace_s": grace,
                    "gang": g.name if g.kind == GANG else "", "min_member": g.pods if g.kind == GANG else None,
                    "labels": {TIER_LABEL: "batch", WORK_ANNOTATION: work}})
    return out


def _container(name: str, node: str, cpu_m: int, memory_mib: int, limit_ratio: float, labels: dict) -> dict:
    limit_cpu = max(cpu_m, round(cpu_m * limit_ratio))
    limit_mib = max(memory_mib, round(memory_mib * limit_ratio), MIN_MEMORY_LIMIT_MIB)
    return {"name": name.replace("/", "-")[:120], "node": node, "image": IMAGE,
            "labels": {**labels, "kalena.naughtian.io/request-cpu": f"{cpu_m}m",
                       "kalena.naughtian.io/request-memory": str(memory_mib * 2**20)},
            "nano_cpus": limit_cpu * 1_000_000, "mem_limit": limit_mib * 2**20,
            "cpu_shares": max(2, round(cpu_m * 1024 / 1000)), "mem_reservation": memory_mib * 2**20}


# -- placement and summary -----------------------------------------------------------------------

def placement(prod: ProductionSlice, usage: SliceUsage) -> dict:
    """The blueprint's node for every slice pod, the lab nodes' labels, and per workload the
    count of its pods on each lab node."""
    nodes = {lab: {"blueprint_node": src, "labels": {**prod.node_labels[lab], HOSTNAME: lab,
                                                     ZONE: prod.zones[lab], **({RACK: prod.racks[lab]}
                                                                               if prod.racks[lab] else {})},
                   "taints": [{"key": t.key, "value": t.value, "effect": t.effect}
                              for t in prod.node_taints.get(lab, ())],
                   "daemonsets": list(prod.daemonsets_on.get(lab, ()))}
             for lab, src in prod.node_map}
    workloads = []
    for d in prod.declarations:
        per_node: dict[str, int] = {}
        for p in d.pods:
            per_node[p.node] = per_node.get(p.node, 0) + 1
        workloads.append({"kind": d.kind, "namespace": d.namespace, "name": d.name, "replicas": len(d.pods),
                          "nodes": per_node, "cpu_m": d.cpu_m, "memory_mib": d.memory_mib})
    index = {p.id: i for i, p in enumerate(prod.pods)}
    pods = {p.id: {"node": p.node, "source": p.source_id, "source_node": p.source_node,
                   "vm": usage.vm_ids[index[p.id]], "usage_of": prod.declaration_of(p).pods[0].id}
            for p in prod.pods}
    return {"nodes": nodes, "workloads": workloads, "pods": pods}


def slice_summary(config: SliceConfig, inputs: dict[str, Path], prod: ProductionSlice, usage: SliceUsage,
                  replay_usage: SliceUsage, batch: BatchSample, slack: np.ndarray, capacity_m: np.ndarray) -> dict:
    """What was taken, the scale factors, compression, load factor, and what was dropped and why."""
    kinds: dict[str, int] = {}
    for d in prod.declarations:
        kinds[d.kind] = kinds.get(d.kind, 0) + 1
    batch_kinds: dict[str, int] = {}
    for g in batch.groups:
        batch_kinds[g.kind] = batch_kinds.get(g.kind, 0) + 1
    scaled = {ds.name: ds for ds in prod.daemonsets}
    node_requests = {lab: {"cpu_m": sum(scaled[n].cpu_m for n in prod.daemonsets_on[lab]),
                           "memory_mib": sum(scaled[n].memory_mib for n in prod.daemonsets_on[lab])}
                     for lab, _ in prod.node_map}
    for d in prod.declarations:
        for p in d.pods:
            node_requests[p.node]["cpu_m"] += d.cpu_m
            node_requests[p.node]["memory_mib"] += d.memory_mib
    return {
        "inputs": {k: str(v) for k, v in inputs.items()},
        "config": {k: getattr(config, k) for k in config.__dataclass_fields__},
        "lab": {"nodes": [lab for lab, _ in prod.node_map], "cpu_m": config.cpu_m, "memory_mib": config.memory_mib,
                "post_phase0_cpu_m": [float(c) for c in capacity_m]},
        "blueprint_nodes": {lab: src for lab, src in prod.node_map},
        "candidates": prod.candidates,
        "scale": {"cpu": prod.cpu_scale, "memory": prod.memory_scale,
                  "from": {"cpu_m": prod.source_allocatable_mcpu, "memory_bytes": prod.source_allocatable_bytes},
                  "rounding": prod.rounding},
        "node_requests": node_requests,
        "production": {"pods": len(prod.pods), "declarations": len(prod.declarations), "kinds": kinds,
                       "daemonsets": [ds.name for ds in prod.daemonsets]},
        "usage": {"mapping": "peak", "step_s": config.step_s, "step_wall_s": usage.step_wall_s,
                  "steps": int(usage.cpu_m.shape[1]), "wall_s": usage.wall_s, "vms_covering": usage.usage_vms,
                  "clipped_share": replay_usage.clipped_share,
                  "note": "every pod of a declaration follows its replica 0's series (one template)"},
        "compression": {"speed": config.speed, "trace_hours": config.hours,
                        "wall_minutes": config.hours * 60 / config.speed,
                        "grace_s": max(1, math.ceil(DEFAULT_GRACE_S / config.speed))},
        "slack": {"m_s": batch.slack_m_s, "mean_per_node_m": [float(x) for x in slack.mean(axis=1)]},
        "batch": {"load_factor": batch.load_factor, "measured_load_factor": batch.measured_load_factor,
                  "target_m_s": batch.target_m_s, "demand_m_s": batch.demand_m_s, "arrivals": len(batch.groups),
                  "pods": batch.pods, "kinds": batch_kinds, "bundle": max((g.instances for g in batch.groups), default=1), "copies": batch.copies,
                  "window_tasks": batch.window_tasks, "window_instances": batch.window_instances,
                  "floored_tasks": batch.floored_tasks, "min_wall_s": config.min_wall_s,
                  "max_pod_cpu_m": max(1, config.cpu_m // 4), "max_pod_memory_mib": max(1, config.memory_mib // 4),
                  "trace_anomalies": batch.anomalies,
                  "note": (f"{batch.pods} pods exceed the {config.max_batch_pods} asked: a pod carries at most a quarter "
                           "of a node, so this load factor needs them (lower --load-factor or raise --min-wall-s)"
                           if batch.pods > config.max_batch_pods else "")},
        "dropped": list(prod.dropped) + ([f"{batch.window_tasks - len(batch.groups)} batch tasks of the window "
                                          "not sampled (the load factor's target was reached)"]
                                         if batch.window_tasks > len(batch.groups) else []),
    }


def summary_text(s: dict) -> str:
    """The summary for a reader, one fact a line."""
    lines = [
        f"lab: {len(s['lab']['nodes'])} nodes × {s['lab']['cpu_m']} m / {s['lab']['memory_mib']} MiB",
        "blueprint nodes: " + ", ".join(f"{lab} ← {src}" for lab, src in s["blueprint_nodes"].items()),
        f"scale: cpu × {s['scale']['cpu']:.6g}, memory × {s['scale']['memory']:.6g} "
        f"(from {s['scale']['from']['cpu_m'] / 1000:g} cores / {s['scale']['from']['memory_bytes'] / 2**30:g} GiB; "
        f"requests rounded {s['scale']['rounding']})",
        f"production: {s['production']['pods']} pods in {s['production']['declarations']} declarations "
        + ", ".join(f"{k} {n}" for k, n in sorted(s["production"]["kinds"].items()))
        + f"; DaemonSets {', '.join(s['production']['daemonsets'])}",
        "requests per node: " + ", ".join(f"{n} {v['cpu_m']} m / {v['memory_mib']} MiB"
                                          for n, v in s["node_requests"].items()),
        f"usage: Bitbrains peak mapping, {s['usage']['steps']} steps of {s['usage']['step_s']:g} s "
        f"→ {s['usage']['step_wall_s']:g} s wall; clipped at the limit {s['usage']['clipped_share']:.2%} of pod-steps",
        f"compression: ×{s['compression']['speed']:g}: {s['compression']['trace_hours']:g} h of trace in "
        f"{s['compression']['wall_minutes']:g} min; grace {s['compression']['grace_s']} s",
        f"slack: {s['slack']['m_s']:,.0f} m·s of cpu, {s['slack']['memory_mib_s']:,.0f} MiB·s of memory over the run",
        f"batch: load factor {s['batch']['load_factor']:g} stated, {s['batch']['measured_load_factor']:.3f} measured "
        f"(memory {s['batch']['memory_load_factor']:.3f}); "
        f"{s['batch']['arrivals']} arrivals, {s['batch']['pods']} pods ("
        + ", ".join(f"{k} {n}" for k, n in sorted(s["batch"]["kinds"].items()))
        + f"), up to {s['batch']['bundle']} trace instances a pod, durations floored at {s['batch']['min_wall_s']:g} s "
        f"wall ({s['batch']['floored_tasks']} tasks)" + (f"; {s['batch']['note']}" if s["batch"]["note"] else ""),
        "dropped:",
        *[f"  - {d}" for d in s["dropped"]],
    ]
    return "\n".join(lines) + "\n"


class _PlainDumper(yaml.SafeDumper):
    """YAML without anchors and aliases (every manifest reads on its own)."""

    def ignore_aliases(self, data) -> bool:
        return True


def _yaml_all(docs: list[dict]) -> str:
    return yaml.dump_all(docs, Dumper=_PlainDumper, sort_keys=False, width=10_000)


def _json(data) -> str:
    return json.dumps(data, indent=1, sort_keys=False) + "\n"
