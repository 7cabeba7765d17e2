"""Kalena's batch resource model on Kubernetes (docs/design.md §14; Koordinator's batch-cpu/batch-memory):
names, the annotation that carries a batch pod's original cpu/memory, and Kubernetes quantity
rules. Pure (no API calls).

A batch pod admitted by the webhook requests (and is limited to — Kubernetes requires an
extended resource's limit to equal its request) ``kalena.naughtian.io/batch-cpu`` (millicores)
and ``kalena.naughtian.io/batch-memory`` (bytes) instead of cpu/memory; its original requests and
limits travel in the ``kalena.naughtian.io/resources`` annotation (JSON, below), which the agent
reads to write the pod's cgroups and the watcher reads for the pod's request and limit.

Annotation (version 1)::

    {"version": 1,
     "containers": {"main": {"requests": {"cpu": "4", "memory": "8Gi"},
                             "limits": {"cpu": "4", "memory": "8Gi"}}},
     "initContainers": {},
     "pod": {"request_mcpu": 4000, "request_bytes": 8589934592,
             "limit_mcpu": 4000, "limit_bytes": 8589934592}}

``pod`` holds the effective pod values (Kubernetes' rule: ``max(Σ containers, max init
container)`` per resource); a limit is ``null`` when some container declares none (the pod's
limit is then undefined — see docs/kubernetes-admission.md for how Kalena treats it).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation

from kubernetes.utils.quantity import parse_quantity

BATCH_CPU = "kalena.naughtian.io/batch-cpu"
BATCH_MEMORY = "kalena.naughtian.io/batch-memory"
RESOURCES_ANNOTATION = "kalena.naughtian.io/resources"
SCHEDULER_NAME = "kalena"


class QuantityError(ValueError):
    """A value that is not a Kubernetes quantity (``field`` names where it was)."""

    def __init__(self, message: str, *, field: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field


def quantity(raw: object, *, field: str) -> Decimal:
    """A non-negative Kubernetes quantity (``"250m"``, ``"8Gi"``, ``"1e3"``, ``4``) as a Decimal.

    Raises:
        QuantityError: not a quantity, or negative, naming ``field``.
    """
    if isinstance(raw, bool) or not isinstance(raw, str | int | float):
        raise QuantityError(f"expected a quantity string, got {type(raw).__name__}", field=field)
    try:
        value = parse_quantity(raw)
    except (ValueError, InvalidOperation, TypeError):
        raise QuantityError(f"{_shown(raw)} is not a Kubernetes quantity (e.g. 500m, 2, 8Gi, 1.5G)", field=field) from None
    if not value.is_finite() or value < 0:
        raise QuantityError(f"{_shown(raw)} must be a finite non-negative quantity", field=field)
    return value


def _shown(raw: object) -> str:
    text = repr(raw)
    return text if len(text) <= 40 else f"{text[:37]}… ({len(text)} characters)"


def cpu_mcpu(raw: object, *, field: str) -> int:
    """cpu quantity → whole millicores, rounded up (Kubernetes ``MilliValue``): ``"8.25"`` → 8250,
    ``"0.1m"`` → 1."""
    return int(math.ceil(quantity(raw, field=field) * 1000))


def memory_bytes(raw: object, *, field: str) -> int:
    """memory quantity → whole bytes, rounded up (Kubernetes ``Value``): ``"32.5Gi"`` → 34,896,609,280."""
    return int(math.ceil(quantity(raw, field=field)))


@dataclass(frozen=True)
class PodResources:
    """A batch pod's original cpu/memory as the annotation carries them (internal units);
    a limit is ``None`` when undefined (some container declares none)."""

    request_mcpu: int
    request_bytes: int
    limit_mcpu: int | None
    limit_bytes: int | None

    def to_json(self) -> dict[str, int | None]:
        return {"request_mcpu": self.request_mcpu, "request_bytes": self.request_bytes,
                "limit_mcpu": self.limit_mcpu, "limit_bytes": self.limit_bytes}


def effective(containers: list[Mapping[str, int | None]], init: list[Mapping[str, int | None]], key: str) -> int | None:
    """Kubernetes' effective pod value of ``key``: ``max(Σ containers, max init container)``;
    ``None`` when a regular container has ``None`` (undefined limit). Example: containers 4000 +
    250, init 1000 → 4250."""
    values = [c[key] for c in containers]
    if any(v is None for v in values):
        return None
    inits = [c[key] for c in init if c[key] is not None]
    return max(sum(values), max(inits, default=0))  # type: ignore[arg-type]


def read_annotation(annotations: Mapping[str, str] | None) -> PodResources | None:
    """The pod values of the ``kalena.naughtian.io/resources`` annotation, ``None`` when absent.

    Raises:
        QuantityError: the annotation is not the JSON of version 1 (names the field).
    """
    raw = (annotations or {}).get(RESOURCES_ANNOTATION)
    if raw is None:
        return None
    field = f"metadata.annotations[{RESOURCES_ANNOTATION}]"
    try:
        doc = json.loads(raw)
        pod = doc["pod"]
        values = {k: pod[k] for k in ("request_mcpu", "request_bytes", "limit_mcpu", "limit_bytes")}
    except (ValueError, TypeError, KeyError) as exc:
        raise QuantityError(f"not Kalena's resources JSON ({exc})", field=field) from None
    for key, value in values.items():
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
            raise QuantityError(f"pod.{key} {value!r} is not a non-negative integer", field=field)
    if values["request_mcpu"] is None or values["request_bytes"] is None:
        raise QuantityError("pod requests cannot be null", field=field)
    return PodResources(**values)


def pod_values(pod: Mapping) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """``(requests, limits)`` 8-vectors (internal units, docs/design.md §2) of a pod in API JSON; a limit
    is NaN where undefined (some container declares none).

    cpu/memory come from the ``kalena.naughtian.io/resources`` annotation when the webhook
    converted the pod, else from the containers (Kubernetes rules: a container with only a limit
    requests its limit; the pod value is ``max(Σ containers, max init container)``); gpu is
    ``nvidia.com/gpu``, storage ``ephemeral-storage``. Example: containers 8 cores / 32Gi with
    limits 16 / 64Gi, and 250m / 512Mi without limits → requests 8250 mcpu, 32.5 GiB; limits NaN.

    Raises:
        QuantityError: a quantity that is not one, naming the field.
    """
    spec = pod.get("spec") or {}
    names = ("cpu", "memory", "nvidia.com/gpu", "ephemeral-storage")
    per: dict[str, list[dict[str, int | None]]] = {"containers": [], "initContainers": []}
    for group in per:
        for i, container in enumerate(spec.get(group) or []):
            resources = container.get("resources") or {}
            requests, limits = resources.get("requests") or {}, resources.get("limits") or {}
            row: dict[str, int | None] = {}
            for name in names:
                parse = cpu_mcpu if name == "cpu" else memory_bytes
                where = f"spec.{group}[{i}].resources"
                limit = None if name not in limits else parse(limits[name], field=f"{where}.limits.{name}")
                request = limit if name not in requests else parse(requests[name], field=f"{where}.requests.{name}")
                row[f"q:{name}"], row[f"l:{name}"] = request or 0, limit
            per[group].append(row)

    def pod_value(key: str) -> float:
        value = effective(per["containers"], per["initContainers"], key)
        return float(value) if value is not None else math.nan

    q = {n: pod_value(f"q:{n}") for n in names}
    lim = {n: pod_value(f"l:{n}") for n in names}
    converted = read_annotation((pod.get("metadata") or {}).get("annotations"))
    if converted is not None:
        q["cpu"], q["memory"] = float(converted.request_mcpu), float(converted.request_bytes)
        lim["cpu"] = math.nan if converted.limit_mcpu is None else float(converted.limit_mcpu)
        lim["memory"] = math.nan if converted.limit_bytes is None else float(converted.limit_bytes)
    zero = (0.0, 0.0, 0.0, 0.0)
    return (*(q[n] for n in names), *zero), (*(lim[n] for n in names), *zero)


def pod_vectors(pod: Mapping) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """:func:`pod_values` with an undefined limit read as the request (docs/design.md §5: ``L = q``
    without a declared limit) and never below it."""
    requests, limits = pod_values(pod)
    return requests, tuple(r if math.isnan(v) else max(v, r) for v, r in zip(limits, requests, strict=True))
