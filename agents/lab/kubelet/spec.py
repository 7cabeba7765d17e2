"""What the kubelet decides from a pod's spec, before anything runs (pure: pod JSON in, numbers out).

* **QoS class** (Kubernetes ``GetPodQOS``): BestEffort when no container requests or limits cpu or
  memory; Guaranteed when every container's cpu and memory limits are set and equal to its
  requests; else Burstable. A batch pod converted by Kalena's webhook requests only the extended
  resources ``kalena.naughtian.io/batch-cpu|batch-memory``, so the kubelet sees it BestEffort
  (its real limits, in the ``kalena.naughtian.io/resources`` annotation, are the agent's to enforce).
* **Admission** (kubelet ``noderesources`` fit, run by the pod admit handler): for every resource
  the pod requests (``pods`` counts 1), Σ requests of the pods already admitted on the node and not
  terminal + the pod's own ≤ ``status.allocatable``; the first resource (sorted by name) that does
  not fit refuses it with reason ``OutOf<resource>`` and the kubelet's message, e.g. 300 m asked
  with 100 m used on a 250 m node → ``OutOfcpu``.
* **cgroup values** (kubelet ``cm/helpers_linux.go``, cgroupfs driver, cgroup v1):
  ``cpu.shares = max(2, mcpu × 1024 / 1000)`` (MilliCPUToShares: 250 m → 256, 0 → 2);
  ``cpu.cfs_quota_us = max(1000, mcpu × 100 000 / 1000)`` over a 100 000 µs period
  (MilliCPUToQuota: 500 m → 50 000; no limit → -1); the pod group gets the sums over its containers
  (quota and memory limit only when every container declares that limit; a BestEffort pod's
  shares are 2).
* **oom_score_adj** (kubelet ``qos/policy.go``): Guaranteed -997, BestEffort 1000, Burstable
  ``min(max(2, 1000 − 1000 × memory request / node memory capacity), 999)``, e.g. 64 MiB asked on a
  256 MiB node → 1000 − 250 = 750.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from agents.orchestrators.kubernetes.batch_resources import RESOURCES_ANNOTATION, QuantityError, cpu_mcpu, memory_bytes

MIN_SHARES = 2
SHARES_PER_CPU = 1024
CFS_PERIOD_US = 100_000
MIN_QUOTA_US = 1000
GUARANTEED_OOM_SCORE_ADJ = -997
BESTEFFORT_OOM_SCORE_ADJ = 1000
TERMINAL_PHASES = ("Succeeded", "Failed")
USAGE_ANNOTATION = "lab.kalena.naughtian.io/usage"
WORK_ANNOTATION = "lab.kalena.naughtian.io/work"
LAB_IMAGE = "kalena/lab-burner:test"
BUSYBOX_IMAGE = "kalena/busybox:test"
BURNER = "/bin/burner"
#: Kalena's own images: ``kalena lab`` runs their containers as local processes (agents.lab.manifests),
#: so the pod's container here only holds its place (its requests count against allocatable)
PROCESS_IMAGES = ("kalena/agent", "kalena/control-plane")


class SpecError(ValueError):
    """A pod whose spec or lab annotation the kubelet cannot run (``field`` says where)."""

    def __init__(self, message: str, *, field: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field


def _amount(name: str, raw: object, field: str) -> float:
    try:
        return float(cpu_mcpu(raw, field=field) if name == "cpu" else memory_bytes(raw, field=field))
    except QuantityError as exc:
        raise SpecError(str(exc).split(": ", 1)[-1], field=field) from None


def container_resources(container: Mapping[str, Any], *, field: str) -> tuple[dict[str, float], dict[str, float]]:
    """``(requests, limits)`` of one container, cpu in mcpu and everything else in its base unit; a
    request left out defaults to the limit (the API server's defaulting)."""
    resources = container.get("resources") or {}
    limits = {k: _amount(k, v, f"{field}.resources.limits.{k}") for k, v in (resources.get("limits") or {}).items()}
    requests = {k: _amount(k, v, f"{field}.resources.requests.{k}") for k, v in (resources.get("requests") or {}).items()}
    return {**limits, **requests}, limits


def pod_requests(pod: Mapping[str, Any]) -> dict[str, float]:
    """Σ requests per resource over the app containers, init containers by the max rule, plus
    ``pods: 1`` (what the kubelet's admission counts). Raises SpecError on a bad quantity."""
    spec = pod.get("spec") or {}
    total: dict[str, float] = {"pods": 1.0}
    for i, c in enumerate(spec.get("containers") or []):
        for k, v in container_resources(c, field=f"spec.containers[{i}]")[0].items():
            total[k] = total.get(k, 0.0) + v
    for i, c in enumerate(spec.get("initContainers") or []):
        for k, v in container_resources(c, field=f"spec.initContainers[{i}]")[0].items():
            total[k] = max(total.get(k, 0.0), v)
    return total


def qos_class(pod: Mapping[str, Any]) -> str:
    """``Guaranteed`` | ``Burstable`` | ``BestEffort`` (module doc)."""
    spec = pod.get("spec") or {}
    containers = [*(spec.get("containers") or []), *(spec.get("initContainers") or [])]
    seen, guaranteed = False, True
    for i, c in enumerate(containers):
        requests, limits = container_resources(c, field=f"containers[{i}]")
        for name in ("cpu", "memory"):
            if name in requests or name in limits:
                seen = True
            if name not in limits or requests.get(name) != limits[name]:
                guaranteed = False
    return "BestEffort" if not seen else ("Guaranteed" if guaranteed else "Burstable")


@dataclass(frozen=True)
class Refusal:
    """An admission refusal as the kubelet writes it into the pod's status."""

    resource: str
    requested: float
    used: float
    capacity: float

    @property
    def reason(self) -> str:
        return f"OutOf{self.resource}"

    @property
    def message(self) -> str:
        return (f"Pod was rejected: Node didn't have enough resource: {self.resource}, requested: "
                f"{self.requested:.0f}, used: {self.used:.0f}, capacity: {self.capacity:.0f}")


def allocatable_amounts(allocatable: Mapping[str, Any]) -> dict[str, float]:
    """A node's ``status.allocatable`` map → amounts (cpu in mcpu, the rest in base units)."""
    return {name: _amount(name, raw, f"status.allocatable.{name}") for name, raw in allocatable.items()}


def admit(pod: Mapping[str, Any], admitted: list[Mapping[str, Any]], allocatable: Mapping[str, float]) -> Refusal | None:
    """``None`` when ``pod`` fits beside ``admitted`` (non-terminal pods already on the node) in
    ``allocatable`` (amounts, :func:`allocatable_amounts`), else the first :class:`Refusal`.

    Example: allocatable cpu 250 m, one admitted pod asking 100 m, the new pod 200 m →
    ``Refusal("cpu", requested=200, used=100, capacity=250)`` (reason ``OutOfcpu``)."""
    used: dict[str, float] = {}
    for other in admitted:
        for name, value in pod_requests(other).items():
            used[name] = used.get(name, 0.0) + value
    for name, value in sorted(pod_requests(pod).items()):
        if value <= 0:
            continue
        capacity = allocatable.get(name, 0.0)
        if used.get(name, 0.0) + value > capacity + 1e-9:
            return Refusal(name, value, used.get(name, 0.0), capacity)
    return None


def cpu_shares(mcpu: float) -> int:
    """MilliCPUToShares: ``max(2, mcpu × 1024 / 1000)`` (250 m → 256; 0 → 2)."""
    return max(MIN_SHARES, int(mcpu * SHARES_PER_CPU // 1000))


def cpu_quota_us(limit_mcpu: float | None) -> int:
    """MilliCPUToQuota over a 100 ms period: ``max(1000, mcpu × 100)`` (500 m → 50 000); ``-1`` without a limit."""
    if limit_mcpu is None or limit_mcpu <= 0:
        return -1
    return max(MIN_QUOTA_US, int(limit_mcpu * CFS_PERIOD_US // 1000))


def oom_score_adj(qos: str, memory_request_bytes: float, memory_capacity_bytes: float) -> int:
    """The container's ``oom_score_adj`` by QoS class (module doc)."""
    if qos == "Guaranteed":
        return GUARANTEED_OOM_SCORE_ADJ
    if qos == "BestEffort":
        return BESTEFFORT_OOM_SCORE_ADJ
    adj = 1000 - int(1000 * memory_request_bytes // max(1.0, memory_capacity_bytes))
    return min(max(2, adj), 999)


@dataclass(frozen=True)
class ContainerPlan:
    """One container as the kubelet starts it on the engine."""

    name: str
    image: str            # the engine's image (the lab's own, or ``kalena/busybox:test``)
    command: list[str]
    cpu_shares: int
    cpu_quota_us: int     # -1: none
    memory_limit_bytes: int  # 0: none
    oom_score_adj: int
    env: tuple[tuple[str, str], ...] = ()   # the container's literal ``env`` values (``valueFrom`` is not resolved)


@dataclass(frozen=True)
class PodPlan:
    """The pod's cgroup values and containers."""

    qos: str
    cpu_shares: int
    cpu_quota_us: int
    memory_limit_bytes: int
    containers: tuple[ContainerPlan, ...]


def _series(raw: str) -> list[str]:
    try:
        doc = json.loads(raw)
    except ValueError as exc:
        raise SpecError(f"not JSON ({exc})", field=f"metadata.annotations.{USAGE_ANNOTATION}") from None
    where = f"metadata.annotations.{USAGE_ANNOTATION}"
    if not isinstance(doc, Mapping):
        raise SpecError("expected an object {step_s, cpu_m, memory_mib, repeat}", field=where)
    step = doc.get("step_s")
    cpu, mem = doc.get("cpu_m"), doc.get("memory_mib")
    if isinstance(step, bool) or not isinstance(step, int | float) or not step > 0 or not math.isfinite(step):
        raise SpecError(f"step_s {step!r} is not a number of seconds > 0", field=where)
    for name, values in (("cpu_m", cpu), ("memory_mib", mem)):
        if not isinstance(values, list) or not values or any(
                isinstance(v, bool) or not isinstance(v, int | float) or v < 0 or not math.isfinite(v) for v in values):
            raise SpecError(f"{name} must be a non-empty list of numbers ≥ 0", field=where)
    if len(cpu) != len(mem):
        raise SpecError(f"cpu_m has {len(cpu)} steps, memory_mib {len(mem)}: they must be equal", field=where)
    repeat = doc.get("repeat", True)
    return [BURNER, "series", f"{float(step):g}", "1" if repeat else "0",
            ",".join(str(int(round(v))) for v in cpu), ",".join(str(int(round(v))) for v in mem)]


def _work(raw: str) -> list[str]:
    where = f"metadata.annotations.{WORK_ANNOTATION}"
    try:
        doc = json.loads(raw)
    except ValueError as exc:
        raise SpecError(f"not JSON ({exc})", field=where) from None
    if not isinstance(doc, Mapping):
        raise SpecError("expected an object {cpu_m, memory_mib, duration_s}", field=where)
    values = []
    for name in ("cpu_m", "memory_mib", "duration_s"):
        v = doc.get(name)
        if isinstance(v, bool) or not isinstance(v, int | float) or v < 0 or not math.isfinite(v):
            raise SpecError(f"{name} {v!r} is not a number ≥ 0", field=where)
        values.append(v)
    return [BURNER, "work", str(int(round(values[0]))), str(int(round(values[1]))), f"{float(values[2]):g}"]


def container_command(pod: Mapping[str, Any], container: Mapping[str, Any]) -> tuple[str, list[str]]:
    """``(image, argv)`` a container runs as on the lab's engine:

    * the pod annotation ``lab.kalena.naughtian.io/usage`` = ``{"step_s", "cpu_m": [...],
      "memory_mib": [...], "repeat"}`` → the lab's burner following that series;
    * ``lab.kalena.naughtian.io/work`` = ``{"cpu_m", "memory_mib", "duration_s"}`` → the burner
      doing ``cpu_m × duration_s`` of cpu work holding ``memory_mib``, then exiting 0;
    * an image of :data:`PROCESS_IMAGES` → ``sleep`` in ``kalena/busybox:test`` (the lab runs it as a process);
    * else → the container's own ``command`` + ``args``, in ``kalena/busybox:test`` unless the
      image is the lab's (no registry here: other images cannot be pulled); no command at all →
      ``sleep`` forever (the image's entrypoint is not known).

    Raises:
        SpecError: an annotation that is not the JSON above.
    """
    annotations = (pod.get("metadata") or {}).get("annotations") or {}
    if USAGE_ANNOTATION in annotations:
        return LAB_IMAGE, _series(str(annotations[USAGE_ANNOTATION]))
    if WORK_ANNOTATION in annotations:
        return LAB_IMAGE, _work(str(annotations[WORK_ANNOTATION]))
    if str(container.get("image", "")).rsplit(":", 1)[0] in PROCESS_IMAGES:
        return BUSYBOX_IMAGE, ["sleep", "2147483647"]  # the lab runs this container as a process: hold the pod's place
    argv = [str(x) for x in [*(container.get("command") or []), *(container.get("args") or [])]]
    image = LAB_IMAGE if container.get("image") == LAB_IMAGE else BUSYBOX_IMAGE
    return image, argv or ["sleep", "2147483647"]


#: headroom for what the burner and the container's init process hold themselves (measured on a
#: lab day: 0.5–0.8 MiB of static binary, stack and page tables in a pod's group): a series is held this far below the container's memory
#: limit, so a pod whose usage reaches its limit in the trace runs at its limit instead of being
#: OOM-killed for the burner's own pages
BURNER_OVERHEAD_MIB = 3


def within_limit(argv: list[str], memory_limit_bytes: float | None) -> list[str]:
    """The burner's ``argv`` with every memory figure at most the container's limit less
    :data:`BURNER_OVERHEAD_MIB` (never below 0); other commands unchanged. Example: a series
    ``…,"10,12,16"`` under a 16 MiB limit → ``"10,12,13"``."""
    if not memory_limit_bytes or len(argv) < 2 or argv[0] != BURNER:
        return argv
    cap = max(0, int(memory_limit_bytes // 2**20) - BURNER_OVERHEAD_MIB)
    if argv[1] == "series" and len(argv) == 6:
        return [*argv[:5], ",".join(str(min(int(v), cap)) for v in argv[5].split(","))]
    if argv[1] == "work" and len(argv) == 5:
        return [*argv[:3], str(min(int(argv[3]), cap)), argv[4]]
    return argv


def _enforced_memory_limit(pod: Mapping[str, Any], container: str) -> float | None:
    """A converted batch pod's memory limit for ``container`` (bytes), from the
    ``kalena.naughtian.io/resources`` annotation Kalena's webhook writes and its agent enforces on
    the pod's cgroup; None when absent or unreadable (the kubelet itself sets no limit then)."""
    raw = ((pod.get("metadata") or {}).get("annotations") or {}).get(RESOURCES_ANNOTATION)
    try:
        limit = json.loads(str(raw))["containers"][container]["limits"]["memory"]
        return float(memory_bytes(limit, field=f"metadata.annotations.{RESOURCES_ANNOTATION}"))
    except (TypeError, ValueError, KeyError, QuantityError):
        return None


def pod_plan(pod: Mapping[str, Any], *, memory_capacity_bytes: float) -> PodPlan:
    """The pod's cgroup values and container plans (module doc for each formula).

    Raises:
        SpecError: a bad quantity or lab annotation.
    """
    qos = qos_class(pod)
    spec = pod.get("spec") or {}
    plans = []
    cpu_requests, cpu_limits, memory_limits = 0.0, [], []
    for i, c in enumerate(spec.get("containers") or []):
        requests, limits = container_resources(c, field=f"spec.containers[{i}]")
        cpu_requests += requests.get("cpu", 0.0)
        cpu_limits.append(limits.get("cpu"))
        memory_limits.append(limits.get("memory"))
        image, argv = container_command(pod, c)
        argv = within_limit(argv, limits.get("memory") or _enforced_memory_limit(pod, str(c.get("name") or "")))
        plans.append(ContainerPlan(
            name=str(c.get("name") or f"c{i}"), image=image, command=argv,
            cpu_shares=cpu_shares(requests.get("cpu", 0.0)), cpu_quota_us=cpu_quota_us(limits.get("cpu")),
            memory_limit_bytes=int(limits.get("memory") or 0),
            oom_score_adj=oom_score_adj(qos, requests.get("memory", 0.0), memory_capacity_bytes),
            env=tuple((str(e["name"]), str(e.get("value", ""))) for e in c.get("env") or []
                      if isinstance(e, Mapping) and e.get("name") and "valueFrom" not in e)))
    all_cpu = bool(cpu_limits) and all(v is not None for v in cpu_limits)
    all_memory = bool(memory_limits) and all(v is not None for v in memory_limits)
    return PodPlan(qos=qos, cpu_shares=MIN_SHARES if qos == "BestEffort" else cpu_shares(cpu_requests),
                   cpu_quota_us=cpu_quota_us(sum(cpu_limits)) if all_cpu else -1,  # type: ignore[arg-type]
                   memory_limit_bytes=int(sum(memory_limits)) if all_memory else 0,  # type: ignore[arg-type]
                   containers=tuple(plans))


def pod_cgroup(node_cgroup: str, uid: str, qos: str) -> str:
    """The pod's group (relative to each hierarchy's root), cgroupfs naming under the node's
    ``kubepods``: ``<node>/kubepods/pod<uid>`` (Guaranteed) or ``<node>/kubepods/<qos>/pod<uid>``
    — what the agent's Kubernetes discovery computes with ``--kube-cgroup-root <node>/kubepods``."""
    base = f"{node_cgroup.strip('/')}/kubepods"
    return f"{base}/pod{uid}" if qos == "Guaranteed" else f"{base}/{qos.lower()}/pod{uid}"


def grace_s(pod: Mapping[str, Any]) -> float:
    """The grace a terminating pod's containers get: ``metadata.deletionGracePeriodSeconds`` when
    the deletion set one, else ``spec.terminationGracePeriodSeconds`` (30)."""
    meta, spec = pod.get("metadata") or {}, pod.get("spec") or {}
    value = meta.get("deletionGracePeriodSeconds")
    if value is None:
        value = spec.get("terminationGracePeriodSeconds", 30)
    return max(0.0, float(value or 0))
