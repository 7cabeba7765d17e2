"""Every unit conversion the agent makes, in one place (docs/design.md §2 internal units).

Internal units: cpu in millicores (mcpu), memory and storage in bytes, GPUs in devices, disk
and network in bytes per second. Telemetry arrives in many units; these functions are the
only place they are converted:

====================================  ===========================  ===============================
source                                unit                         function
====================================  ===========================  ===============================
cgroup v1 ``cpuacct.usage``           ns (cumulative)              :func:`mcpu_from_ns`
cgroup v2 ``cpu.stat usage_usec``     µs (cumulative)              :func:`mcpu_from_us`
v1 ``cpu.stat throttled_time``        ns                           :func:`us_from_ns`
kubelet ``usageNanoCores``            ns of cpu per s              :func:`mcpu_from_nanocores`
Docker ``NanoCpus``                   1e-9 cpu                     :func:`mcpu_from_nanocores`
CFS quota / period                    µs per µs                    :func:`mcpu_from_quota`
Kubernetes quantities (``500m``)      cores, bytes                 :func:`parse_k8s_quantity`
memory working set                    bytes                        :func:`working_set_bytes`
cumulative byte counters              bytes                        :func:`bytes_per_s`
====================================  ===========================  ===============================

Worked example: a cgroup whose ``cpuacct.usage`` grows by 2.5e9 ns in 5 s used
``mcpu_from_ns(2.5e9, 5) = 500`` mcpu (half a core).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from datetime import datetime

import numpy as np

from agents.errors import DiscoveryError, TelemetryError
from kalena_engine.resources import CPU, DISK_READ, DISK_WRITE, GPU, NET_IN, NET_OUT, RAM, STORAGE, zeros

NS_PER_S = 1e9
US_PER_S = 1e6
MCPU_PER_CORE = 1000.0
#: The CFS period Kalena writes (docs/design.md §7), µs.
DEFAULT_CFS_PERIOD_US = 100_000


def mcpu_from_ns(delta_ns: float, delta_s: float) -> float:
    """cpu rate in mcpu from a cumulative ns counter: ``Δns / Δs / 1e6``. ``Δs`` must be > 0."""
    return float(delta_ns) / float(delta_s) / 1e6


def mcpu_from_us(delta_us: float, delta_s: float) -> float:
    """cpu rate in mcpu from a cumulative µs counter: ``Δµs / Δs / 1e3``."""
    return float(delta_us) / float(delta_s) / 1e3


def mcpu_from_nanocores(nanocores: float) -> float:
    """``usageNanoCores`` (or Docker ``NanoCpus``) → mcpu: ``1e9`` nanocores = 1,000 mcpu."""
    return float(nanocores) / 1e6


def us_from_ns(ns: float) -> float:
    """Nanoseconds → microseconds."""
    return float(ns) / 1e3


def ns_from_us(us: float) -> float:
    """Microseconds → nanoseconds (v2 ``cpu.stat usage_usec`` to the v1 ``cpuacct.usage`` unit)."""
    return float(us) * 1e3


def stall_ratio(delta_stall_us: float, delta_s: float) -> float:
    """Share of wall time a PSI ``total`` (µs) grew by: ``Δµs / (Δs · 1e6)``; 150,000 µs in 1 s → 0.15."""
    return float(delta_stall_us) / (float(delta_s) * US_PER_S)


def us_from_s(seconds: float) -> int:
    """Seconds → whole microseconds (PSI trigger windows): 2.0 s → 2,000,000 µs."""
    return int(round(float(seconds) * US_PER_S))


def us_from_ms(milliseconds: float) -> int:
    """Milliseconds → whole microseconds (PSI trigger thresholds): 150 ms → 150,000 µs."""
    return int(round(float(milliseconds) * 1e3))


def mcpu_from_cores(cores: float) -> float:
    """Cores → mcpu (a Kubernetes cpu quantity's base unit is the core)."""
    return float(cores) * MCPU_PER_CORE


def mcpu_from_quota(quota_us: int | None, period_us: int) -> float:
    """A CFS quota as a cpu rate: ``quota / period × 1000`` mcpu; ``None`` (no quota) → +inf."""
    if quota_us is None or quota_us < 0:
        return math.inf
    return quota_us / period_us * MCPU_PER_CORE


def quota_us_from_mcpu(mcpu: float, period_us: int = DEFAULT_CFS_PERIOD_US) -> int:
    """A cpu rate as a CFS quota: ``round(mcpu / 1000 × period)``, at least 1,000 µs (the kernel's
    minimum). Example: 400 mcpu at 100,000 µs → 40,000 µs (case C6)."""
    return max(1000, int(round(mcpu / MCPU_PER_CORE * period_us)))


def bytes_per_s(delta_bytes: float, delta_s: float) -> float:
    """Rate of a cumulative byte counter; a counter that went backwards (reset) gives 0."""
    return max(0.0, float(delta_bytes)) / float(delta_s)


def working_set_bytes(usage_bytes: float, inactive_file_bytes: float) -> float:
    """Memory working set = usage − inactive file cache, floored at 0 (docs/design.md §5; the cAdvisor and
    kubelet definition). Example: usage 300 MiB with 100 MiB inactive file → 200 MiB."""
    return max(0.0, float(usage_bytes) - float(inactive_file_bytes))


# --- Kubernetes quantities -----------------------------------------------------------------

_QUANTITY = re.compile(r"^([+-]?(?:\d+\.?\d*|\.\d+))(?:(e[+-]?\d+)|([a-zA-Z]*))$")
_SUFFIX = {
    "": 1.0, "n": 1e-9, "u": 1e-6, "m": 1e-3, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12,
    "P": 1e15, "E": 1e18, "Ki": 2.0**10, "Mi": 2.0**20, "Gi": 2.0**30, "Ti": 2.0**40,
    "Pi": 2.0**50, "Ei": 2.0**60,
}
QUANTITY_ACCEPTED = "a number with an optional suffix n u m k M G T P E Ki Mi Gi Ti Pi Ei (e.g. 500m, 64Mi)"


def parse_k8s_quantity(value: object, *, source: str, field: str) -> float:
    """Parse a Kubernetes resource quantity (``resource.Quantity`` rules) into base units.

    ``"500m"`` → 0.5, ``"2"`` → 2.0, ``"64Mi"`` → 67,108,864, ``"1G"`` → 1e9, ``"1e3"`` → 1000.

    Raises:
        DiscoveryError: for anything else, naming ``source`` and ``field``.
    """
    if isinstance(value, bool):
        raise DiscoveryError(f"{value!r} is not a quantity", source=source, field=field, accepted=QUANTITY_ACCEPTED)
    if isinstance(value, int | float):
        number = float(value)
    else:
        text = str(value).strip()
        match = _QUANTITY.match(text)
        if not match or (match.group(3) is not None and match.group(3) not in _SUFFIX):
            raise DiscoveryError(f"{value!r} is not a quantity", source=source, field=field,
                                 accepted=QUANTITY_ACCEPTED)
        number = float(match.group(1))
        if match.group(2):
            number *= 10.0 ** int(match.group(2)[1:])
        else:
            number *= _SUFFIX[match.group(3) or ""]
    if not math.isfinite(number) or number < 0:
        raise DiscoveryError(f"{value!r} must be finite and ≥ 0", source=source, field=field,
                             accepted=QUANTITY_ACCEPTED)
    return number


#: Kubernetes resource names → (dimension index, multiplier from base unit to internal unit).
K8S_RESOURCES: dict[str, tuple[int, float]] = {
    "cpu": (CPU, MCPU_PER_CORE),
    "memory": (RAM, 1.0),
    "ephemeral-storage": (STORAGE, 1.0),
    "nvidia.com/gpu": (GPU, 1.0),
    "amd.com/gpu": (GPU, 1.0),
    "kalena.naughtian.io/disk-read": (DISK_READ, 1.0),
    "kalena.naughtian.io/disk-write": (DISK_WRITE, 1.0),
    "kalena.naughtian.io/net-in": (NET_IN, 1.0),
    "kalena.naughtian.io/net-out": (NET_OUT, 1.0),
}


def k8s_resources_vector(resources: Mapping[str, object] | None, *, source: str, field: str,
                         missing: float = 0.0) -> np.ndarray:
    """``{"cpu": "500m", "memory": "64Mi"}`` → an ``(8,)`` internal-unit vector.

    Dimensions not named take ``missing`` (0 for requests, +inf for limits). Resource names
    Kalena does not track (``hugepages-2Mi``, other extended resources) are ignored; a value that
    is not a quantity raises :class:`~agents.errors.DiscoveryError`.
    """
    out = zeros() + missing
    if resources is None:
        return out
    if not isinstance(resources, Mapping):
        raise DiscoveryError(f"expected a mapping of resource names, got {type(resources).__name__}",
                             source=source, field=field)
    for name, value in resources.items():
        if name not in K8S_RESOURCES:
            continue
        dim, scale = K8S_RESOURCES[name]
        out[dim] = parse_k8s_quantity(value, source=source, field=f"{field}.{name}") * scale
    return out


# --- timestamps ----------------------------------------------------------------------------

_RFC3339 = re.compile(r"^(\d{4}-\d{2}-\d{2})[Tt ](\d{2}:\d{2}:\d{2})(?:\.(\d+))?([Zz]|[+-]\d{2}:\d{2})$")


def unix_s_from_rfc3339(text: str, *, source: str, field: str) -> float:
    """RFC 3339 timestamp with any number of fractional digits (Go emits nanoseconds) → Unix
    seconds (float). ``"2024-01-02T03:04:05.123456789Z"`` → 1704164645.123457.

    Raises:
        TelemetryError: naming ``source`` and ``field``.
    """
    match = _RFC3339.match(str(text).strip()) if isinstance(text, str) else None
    if not match:
        raise TelemetryError(f"{text!r} is not an RFC 3339 timestamp", source=source, field=field,
                             accepted="e.g. 2024-01-02T03:04:05.123456789Z")
    date, clock, fraction, zone = match.groups()
    zone = "+00:00" if zone in ("Z", "z") else zone
    base = datetime.fromisoformat(f"{date}T{clock}{zone}").timestamp()
    return base + (float(f"0.{fraction}") if fraction else 0.0)
