"""Docker Engine stats (``GET /containers/{id}/stats?stream=false``, Docker Engine API v1.41
"ContainerStats"): parsing separate from the (slow, ~1 s per call) request.

Fields used::

    id, name, read, preread                                  RFC 3339 times
    cpu_stats.cpu_usage.total_usage, precpu_stats.…          ns, cumulative
    cpu_stats.throttling_data.{periods,throttled_periods,throttled_time (ns)}
    memory_stats.usage, memory_stats.stats.total_inactive_file (cgroup v1) | inactive_file (v2)
    blkio_stats.io_service_bytes_recursive[{major,minor,op,value}]   op Read/Write (v1), read/write (v2)
    networks.{iface}.{rx_bytes,tx_bytes}                     cumulative

cpu (mcpu) = Δtotal_usage / Δ(read − preread) from the one document; memory working set =
usage − inactive file (the ``docker stats`` CLI's definition); io and network rates come from
two successive documents of the same container.

A container stopped or removed while its stats are collected gives an answer with an empty body,
a 404/409, or a document whose ``read`` is the zero time (``0001-01-01T00:00:00Z``): each is a
:class:`~agents.collectors.failures.CollectorFailure` for that container only (``empty_body``,
``gone``), never an exception out of :meth:`DockerStatsCollector.collect`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import numpy as np

from agents.collectors.failures import GONE, CollectorFailure, attempt
from agents.collectors.jsondoc import need, opt
from agents.collectors.rates import RateTracker
from agents.collectors.telemetry import Collection
from agents.errors import TelemetryError
from agents.model import CpuThrottling, UsageSample, Workload
from agents.units import mcpu_from_ns, unix_s_from_rfc3339, us_from_ns, working_set_bytes
from kalena_engine.resources import CPU, DISK_READ, DISK_WRITE, N_DIMS, NET_IN, NET_OUT, RAM

ZERO_TIME_PREFIX = "0001-"


@dataclass(frozen=True)
class DockerStatsPoint:
    """One parsed stats document: rates where one document suffices, cumulative counters else."""

    container_id: str
    name: str
    ts_s: float
    cpu_mcpu: float
    working_set_bytes: float
    memory_usage_bytes: float
    throttling: CpuThrottling | None
    io_read_bytes: float | None
    io_write_bytes: float | None
    net_rx_bytes: float | None
    net_tx_bytes: float | None


def not_running(doc: Any) -> bool:
    """True for the document the engine answers for a container that is no longer running: its
    ``read`` is the zero time and it carries no usage (Docker Engine API v1.41 ContainerStats)."""
    return isinstance(doc, Mapping) and str(doc.get("read") or "").startswith(ZERO_TIME_PREFIX)


def parse_docker_stats(doc: Mapping[str, Any], *, source: str) -> DockerStatsPoint:
    """Parse one Docker stats document (see module docstring for the fields).

    Raises:
        TelemetryError: naming ``source`` and the field that is missing or of the wrong type.
    """
    if not isinstance(doc, Mapping):
        raise TelemetryError(f"expected an object, got {type(doc).__name__}", source=source, field="<document>")
    cid = need(doc, "id", "string", source=source)
    name = (opt(doc, "name", "string", source=source) or "").lstrip("/")
    ts = unix_s_from_rfc3339(need(doc, "read", "string", source=source), source=source, field="read")
    total = need(doc, "cpu_stats.cpu_usage.total_usage", source=source)
    pre_total = opt(doc, "precpu_stats.cpu_usage.total_usage", source=source)
    preread = opt(doc, "preread", "string", source=source)
    cpu = math.nan
    if pre_total is not None and preread and not preread.startswith("0001-"):
        dt = ts - unix_s_from_rfc3339(preread, source=source, field="preread")
        if dt > 0 and total >= pre_total:
            cpu = mcpu_from_ns(total - pre_total, dt)
    usage = need(doc, "memory_stats.usage", source=source)
    inactive = opt(doc, "memory_stats.stats.total_inactive_file", source=source)
    if inactive is None:
        inactive = opt(doc, "memory_stats.stats.inactive_file", source=source) or 0.0
    throttling = None
    if opt(doc, "cpu_stats.throttling_data", "object", source=source) is not None:
        throttling = CpuThrottling(int(need(doc, "cpu_stats.throttling_data.periods", source=source)),
                                   int(need(doc, "cpu_stats.throttling_data.throttled_periods", source=source)),
                                   us_from_ns(need(doc, "cpu_stats.throttling_data.throttled_time", source=source)))
    read = write = None
    entries = opt(doc, "blkio_stats.io_service_bytes_recursive", "list", source=source)
    if entries is not None:
        read = write = 0.0
        for i, entry in enumerate(entries):
            op = str(need(entry, "op", "string", source=source)).lower()
            value = need(entry, "value", source=f"{source}#blkio_stats.io_service_bytes_recursive[{i}]")
            if op == "read":
                read += value
            elif op == "write":
                write += value
    rx = tx = None
    networks = opt(doc, "networks", "object", source=source)
    if networks:
        rx = tx = 0.0
        for iface in networks:
            rx += need(networks, f"{iface}.rx_bytes", source=f"{source}#networks")
            tx += need(networks, f"{iface}.tx_bytes", source=f"{source}#networks")
    return DockerStatsPoint(cid, name, ts, cpu, working_set_bytes(usage, inactive), usage, throttling,
                            read, write, rx, tx)


def sample_from_point(point: DockerStatsPoint, workload_id: str, rates: RateTracker) -> UsageSample:
    """A :class:`~agents.model.UsageSample` from a point, io/network rates via ``rates``."""
    usage = np.full(N_DIMS, math.nan)
    usage[CPU] = point.cpu_mcpu
    usage[RAM] = point.working_set_bytes
    key = f"{workload_id}/"
    usage[DISK_READ] = rates.rate(key + "io_read", point.ts_s, point.io_read_bytes)
    usage[DISK_WRITE] = rates.rate(key + "io_write", point.ts_s, point.io_write_bytes)
    usage[NET_IN] = rates.rate(key + "net_rx", point.ts_s, point.net_rx_bytes)
    usage[NET_OUT] = rates.rate(key + "net_tx", point.ts_s, point.net_tx_bytes)
    return UsageSample(workload_id, point.ts_s, usage, point.memory_usage_bytes, point.throttling)


class DockerStatsCollector:
    """Telemetry from the Docker stats API for ``docker`` workloads (one request per container,
    in parallel; each takes about a second, so use it at the sampling interval, not in the
    pressure path). Other workloads get no sample.

    Args:
        client: a ``docker.DockerClient``.
        workers: parallel requests.
    """

    name = "docker_stats"

    def __init__(self, client: Any, workers: int = 8) -> None:
        self.client = client
        self.rates = RateTracker()
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="docker-stats")

    @staticmethod
    def source_of(workload: Workload) -> str:
        return f"docker:/containers/{workload.runtime_ref[:12]}/stats"

    def _fetch(self, workload: Workload) -> Any:
        """The stats document, or the failure reading it (runs on a pool thread)."""
        return attempt(self.name, workload.id, self.source_of(workload),
                       lambda: self.client.api.stats(workload.runtime_ref, stream=False))

    def _sample(self, workload: Workload, doc: Any) -> UsageSample | CollectorFailure:
        source = self.source_of(workload)
        if not_running(doc):
            return CollectorFailure(self.name, workload.id, source, GONE, "the container is no longer running")
        return attempt(self.name, workload.id, source,
                       lambda: sample_from_point(parse_docker_stats(doc, source=source), workload.id, self.rates))

    def collect(self, workloads: Sequence[Workload], now_s: float, *, memory_only: bool = False) -> Collection:
        out = Collection()
        targets = [w for w in workloads if w.kind == "docker" and w.runtime_ref]
        for workload, doc in zip(targets, self._pool.map(self._fetch, targets), strict=True):
            out.add(workload.id, doc if isinstance(doc, CollectorFailure) else self._sample(workload, doc))
        return out

    def exclude_psi(self, workload_ids: set[str]) -> None:
        """Remote sources read no PSI files of their own: nothing to exclude."""

    def forget(self, workload_id: str) -> None:
        self.rates.forget(f"{workload_id}/")

    def close(self) -> None:
        self._pool.shutdown(wait=False)
