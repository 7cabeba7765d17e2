"""What the scheduling app accepts: its errors and the checks a submission or a watched pod
passes before anything is stored (names, vectors, labels, constraints)."""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence

from kalena_engine.errors import InputError
from kalena_engine.resources import DIM_INDEX, N_DIMS
from kalena_web.scheduling import mappers

NAME_MAX = 253
PRIORITY_MAX = 1_000_000_000  # Kubernetes: user PriorityClass values are at most one billion (int32 storage)
MIN_MEMBER_MAX = 100_000
LABELS_MAX = 64  # Kubernetes sets no count, only 256 KiB of metadata; 64 is ample for a batch pod
TIER_LABEL = "kalena.naughtian.io/tier"
POD_NAME = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?/[a-z0-9]([-.a-z0-9]*[a-z0-9])?")


class BatchRejected(InputError):
    """A batch submission that cannot be accepted; nothing was stored."""


class BatchConflict(InputError):
    """A complete or delete the pod's state does not allow (HTTP 409); nothing changed."""


class BatchNameTaken(BatchConflict):
    """A submission whose name is already in use by a workload with another spec (HTTP 409);
    ``differing`` names the fields that differ (``("priority", "request")``); nothing changed."""

    def __init__(self, problem: str, *, differing: Sequence[str], field: str = "name") -> None:
        super().__init__(problem, field=field, accepted="the same spec again (answered with the existing pod), "
                                                        "or a new name")
        self.differing = tuple(differing)


class BatchNotStopped(InputError):
    """A delete of a running pod the orchestrator refused to stop (HTTP 502); nothing changed."""



def vector8(values: Sequence[float], field_name: str) -> list[float]:
    if len(values) != N_DIMS:
        raise BatchRejected(f"{len(values)} values", field=field_name, accepted=f"an {N_DIMS}-vector (docs/design.md §2)")
    out = []
    for i, value in enumerate(values):
        if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value < 0:
            raise BatchRejected(f"{value!r} is not a finite non-negative number", field=f"{field_name}[{i}]")
        out.append(float(value))
    return out


LABEL_KEY_MAX = 317  # Kubernetes: a DNS subdomain prefix (253) + "/" + a name (63)
LABEL_VALUE_MAX = 4096  # Kubernetes allows 63; Docker and Swarm labels (compose's config hashes, paths) run longer


def check_labels(labels: object, field: str = "labels") -> None:
    """Labels are a mapping of strings to strings, as in Kubernetes and Docker (the scheduler
    matches selectors and spreads on them).

    Raises:
        BatchRejected: naming the label.
    """
    if labels is None:
        return
    if not isinstance(labels, Mapping):
        raise BatchRejected(f"{type(labels).__name__} is not a mapping", field=field,
                            accepted="a mapping of label name → string value")
    for key, value in labels.items():
        if not isinstance(key, str) or not key or len(key) > LABEL_KEY_MAX or "\x00" in key:
            raise BatchRejected(f"{str(key)[:40]!r} is not a label name", field=field,
                                accepted=f"a non-empty string of at most {LABEL_KEY_MAX} characters without NUL")
        if not isinstance(value, str) or len(value) > LABEL_VALUE_MAX or "\x00" in value:
            raise BatchRejected(f"{str(value)[:40]!r} ({type(value).__name__}) is not a label value",
                                field=f"{field}.{key}",
                                accepted=f"a string of at most {LABEL_VALUE_MAX} characters without NUL")


def check_pending(*, ref: str, request, limit, labels, priority: int, owner: str, gang: str = "",
                   min_member: int | None = None, image: str = "", constraints=None, grace_s: float = 30.0,
                   at_s: float = 0.0, uid: str = "") -> None:
    """Every check :func:`~kalena_web.scheduling.observe.batch_observe_pending` makes before it stores anything.

    Raises:
        BatchRejected: naming the field.
    """
    if not isinstance(ref, str) or not POD_NAME.fullmatch(ref) or len(ref) > NAME_MAX:
        raise BatchRejected(f"{ref!r} is not namespace/pod", field="ref", accepted="namespace/pod (DNS-1123)")
    req = vector8(request, "requests")
    vector8(limit, "limits")
    if not isinstance(priority, int) or isinstance(priority, bool) or priority < 0:
        raise BatchRejected(f"{priority!r} is not a non-negative integer", field="priority")
    if req[DIM_INDEX["cpu"]] <= 0 and req[DIM_INDEX["ram"]] <= 0:
        raise BatchRejected("a batch pod must request cpu or ram", field="requests", accepted="cpu > 0 or ram > 0")
    for field_name, text, longest in (("owner", owner, 200), ("image", image, 300), ("gang", gang, 200)):
        if not isinstance(text, str) or "\x00" in text or len(text) > longest:
            raise BatchRejected(f"{str(text)[:40]!r} is not a string of at most {longest} characters", field=field_name)
    if not isinstance(grace_s, int | float) or not math.isfinite(grace_s) or grace_s < 0:
        raise BatchRejected(f"{grace_s!r} is not a grace in seconds", field="grace_s")
    check_labels(labels)
    mappers.template_of(owner=owner, namespace=ref.split("/", 1)[0], labels=labels or {},
                        constraints=dict(constraints or {}), min_member=min_member)

