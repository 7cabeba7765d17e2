"""Kalena's container labels ⇄ a batch pod's identity and request (pure: no engine calls).

One identity for a batch pod from submission to samples, evictions and why-evicted (docs/design.md §14):
the control plane's name ``namespace/pod`` travels in ``kalena.naughtian.io/workload`` on every
container (standalone) or task container (Swarm ``container_labels``) Kalena starts, so the node
agent reports samples and evictions under that name and the watcher names events with it.

=========================================  ==================================================
label                                      value
=========================================  ==================================================
``kalena.naughtian.io/workload``           ``namespace/pod`` — the pod's ref (identity)
``kalena.naughtian.io/tier``               ``batch``
``kalena.naughtian.io/priority``           integer ≥ 0
``kalena.naughtian.io/attempt``            0, 1, … — which placement of the pod (requeues)
``kalena.naughtian.io/request-cpu``        Kubernetes quantity, e.g. ``500m``
``kalena.naughtian.io/request-memory``     Kubernetes quantity in bytes, e.g. ``268435456``
``kalena.naughtian.io/termination-grace-seconds``  the pod's stop grace (s)
=========================================  ==================================================

The engine has no request field beyond ``cpu_shares`` and ``mem_reservation``
(:func:`cpu_shares_from_mcpu`), so the request is in labels; the agent's Docker discovery reads
those labels (``agents.discovery.docker``), never request = limit.

The attempt is also in the container's environment, ``KALENA_ATTEMPT`` (``0``, ``1``, …), for
the job itself. Container names carry the attempt (``kalena-batch-job-1-a2``), so a re-placement never collides
with the stopped container of an earlier attempt (a 409 from the engine).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass

from agents.discovery.labels import GRACE, PREFIX, PRIORITY, TIER
from agents.errors import DiscoveryError
from agents.orchestrators.base import ID_LABEL, BatchSpec
from agents.units import QUANTITY_ACCEPTED, parse_k8s_quantity

ATTEMPT = PREFIX + "attempt"
#: the environment variable every batch container (standalone) or task (Swarm) gets: the attempt
#: as a decimal string — a job that checkpoints can tell a re-placement from its first run
ATTEMPT_ENV = "KALENA_ATTEMPT"
REQUEST_CPU = PREFIX + "request-cpu"
REQUEST_MEMORY = PREFIX + "request-memory"
LIMIT_CPU = PREFIX + "limit-cpu"
LIMIT_MEMORY = PREFIX + "limit-memory"
REF_PATTERN = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?/[a-z0-9]([-.a-z0-9]*[a-z0-9])?")
#: Docker's default cpu.shares (1024 = one cpu's weight, the Kubernetes convention) and its floor.
SHARES_PER_CPU = 1024
MIN_SHARES = 2


class LabelError(ValueError):
    """A container's Kalena labels are malformed; the message names the container and label."""


@dataclass(frozen=True)
class PodIdentity:
    """What a container's labels say about the batch pod it runs.

    Attributes:
        ref: ``namespace/pod`` (the control plane's name).
        attempt: which placement (0 = the first).
        tier: ``batch`` | ``service``.
        priority: Kalena priority (docs/design.md §4).
        request_mcpu, request_bytes: the pod's request (0 when the label is absent).
        grace_s: stop grace, None when not labelled.
    """

    ref: str
    attempt: int
    tier: str
    priority: int
    request_mcpu: float = 0.0
    request_bytes: float = 0.0
    grace_s: float | None = None


def container_name(ref: str, attempt: int = 0) -> str:
    """A Docker-safe, per-attempt name: ``batch/job-1``, attempt 2 → ``kalena-batch-job-1-a2``.

    Docker names allow ``[a-zA-Z0-9][a-zA-Z0-9_.-]``; the ``/`` of the ref becomes ``-``.
    """
    return "kalena-" + re.sub(r"[^a-zA-Z0-9_.-]", "-", ref) + f"-a{int(attempt)}"


def cpu_shares_from_mcpu(request_mcpu: float) -> int:
    """``cpu_shares`` for a cpu request: ``max(2, round(request_mcpu × 1024 / 1000))``.

    Kubernetes' kubelet maps requests to cpu.shares the same way (1 core = 1024 shares, floor 2).
    Example: 500 mcpu → 512; 1 mcpu → 2; 0 → 2.
    """
    return max(MIN_SHARES, int(round(request_mcpu * SHARES_PER_CPU / 1000.0)))


def labels_for(spec: BatchSpec, *, attempt: int, grace_s: float) -> dict[str, str]:
    """The labels of a batch container (see module table); ``spec.labels`` first, Kalena's win."""
    return {
        **{str(k): str(v) for k, v in spec.labels.items()},
        TIER: "batch", ID_LABEL: spec.id, PRIORITY: str(int(spec.priority)), ATTEMPT: str(int(attempt)),
        REQUEST_CPU: f"{int(round(spec.request_mcpu))}m", REQUEST_MEMORY: str(int(round(spec.request_bytes))),
        LIMIT_CPU: f"{int(round(spec.limit_mcpu))}m", LIMIT_MEMORY: str(int(round(spec.limit_bytes))),
        GRACE: _seconds_text(grace_s),
    }


def _seconds_text(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else f"{value:g}"


def _quantity(text: str, where: str, *, scale: float) -> float:
    try:
        return parse_k8s_quantity(text, source=where, field="") * scale
    except DiscoveryError as exc:
        raise LabelError(f"{where}: {text!r} is not a quantity ({QUANTITY_ACCEPTED})") from exc


def identity_of(labels: Mapping[str, str] | None, *, container: str) -> PodIdentity | None:
    """The pod a container runs, from its labels; None when it carries no Kalena workload label
    (not Kalena's: production or unrelated).

    Raises:
        LabelError: a Kalena label is malformed (the message names ``container`` and the label).
    """
    labels = labels or {}
    ref = labels.get(ID_LABEL)
    if ref is None:
        return None
    where = f"container {container!r}"
    if not isinstance(ref, str) or not REF_PATTERN.fullmatch(ref):
        raise LabelError(f"{where}: label {ID_LABEL}={ref!r} is not namespace/pod")
    tier = labels.get(TIER, "service")
    if tier not in ("batch", "service"):
        raise LabelError(f"{where}: label {TIER}={tier!r} is not batch or service")
    try:
        priority = int(labels.get(PRIORITY, "0"))
        attempt = int(labels.get(ATTEMPT, "0"))
    except ValueError:
        raise LabelError(f"{where}: label {PRIORITY} or {ATTEMPT} is not an integer "
                         f"({labels.get(PRIORITY)!r}, {labels.get(ATTEMPT)!r})") from None
    if priority < 0 or attempt < 0:
        raise LabelError(f"{where}: label {PRIORITY} or {ATTEMPT} is negative")
    grace = labels.get(GRACE)
    grace_s = None
    if grace is not None:
        try:
            grace_s = float(grace)
        except ValueError:
            raise LabelError(f"{where}: label {GRACE}={grace!r} is not a number of seconds") from None
        if not math.isfinite(grace_s) or grace_s < 0:
            raise LabelError(f"{where}: label {GRACE}={grace!r} is not a non-negative number of seconds")
    request_mcpu = (_quantity(labels[REQUEST_CPU], f"{where} label {REQUEST_CPU}", scale=1000.0)
                    if REQUEST_CPU in labels else 0.0)
    request_bytes = (_quantity(labels[REQUEST_MEMORY], f"{where} label {REQUEST_MEMORY}", scale=1.0)
                     if REQUEST_MEMORY in labels else 0.0)
    return PodIdentity(ref=ref, attempt=attempt, tier=tier, priority=priority, request_mcpu=request_mcpu,
                       request_bytes=request_bytes, grace_s=grace_s)
