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
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import docker
import numpy as np

from agents.collectors.jsondoc import need, opt
from agents.collectors.rates import RateTracker
from agents.collectors.telemetry import Collection
from agents.errors import TelemetryError
from agents.model import CpuThrottling, UsageSample, Workload
from agents.units import mcpu_from_ns, unix_s_from_rfc3339, us_from_ns, working_set_bytes
from kalena_engine.resources import CPU, DISK_READ, DISK_WRITE, N_DIMS, NET_IN, NET_OUT, RAM

_GONE = object()


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


def parse_docker_stats(doc: Mapping[str, Any], *, source: str) -> DockerStatsPoint:
    """Parse one Docker stats document (see module docstring for the fields).

    Raises:
        TelemetryError: naming ``source`` and the field that is missing or of the wrong type.
    """
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

    name = "docker"

    def __init__(self, client: Any, workers: int = 8) -> None:
        self.client = client
        self.rates = RateTracker()
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="docker-stats")

    def _fetch(self, workload: Workload) -> Any:
        try:
            return self.client.api.stats(workload.runtime_ref, stream=False)
        except docker.errors.NotFound:
            return _GONE
        except docker.errors.DockerException as exc:
            return exc

    def collect(self, workloads: Sequence[Workload], now_s: float, *, memory_only: bool = False) -> Collection:
        out = Collection()
        targets = [w for w in workloads if w.kind == "docker" and w.runtime_ref]
        for workload, doc in zip(targets, self._pool.map(self._fetch, targets), strict=True):
            source = f"docker:/containers/{workload.runtime_ref[:12]}/stats"
            if doc is _GONE:
                out.gone.add(workload.id)
            elif isinstance(doc, Exception):
                out.errors.append(f"{source}: {doc}")
            else:
                try:
                    out.samples[workload.id] = sample_from_point(parse_docker_stats(doc, source=source),
                                                                 workload.id, self.rates)
                except TelemetryError as exc:
                    out.errors.append(str(exc))
        return out

    def exclude_psi(self, workload_ids: set[str]) -> None:
        """Remote sources read no PSI files of their own: nothing to exclude."""

    def forget(self, workload_id: str) -> None:
        self.rates.forget(f"{workload_id}/")

    def close(self) -> None:
        self._pool.shutdown(wait=False)
