"""cAdvisor REST API telemetry, v1.3 and v2.0 (``google/cadvisor`` docs/api.md and
docs/api_v2.md; structs in ``info/v1/container.go`` and ``info/v2/container.go``).

* v1.3 ``GET /api/v1.3/containers/<absolute name>`` → one ``ContainerInfo``:
  ``{name, aliases, spec, stats: [ContainerStats…]}`` with, per stat, ``timestamp``,
  ``cpu.usage.total`` (ns, cumulative), ``cpu.cfs.{periods,throttled_periods,throttled_time}``,
  ``memory.{usage,working_set}`` (bytes), ``diskio.io_service_bytes[{stats: {Read, Write}}]``,
  ``network.{rx_bytes,tx_bytes}`` and ``network.interfaces[…]`` (cumulative bytes).
* v2.0 ``GET /api/v2.0/stats/<absolute name>?type=name&count=2`` → ``{name: [ContainerStats…]}``
  with the same ``cpu``/``memory``/``diskio`` blocks, ``cpu_inst.usage.total`` (nanocores, an
  instantaneous rate) and ``network.interfaces[…]``.

cpu comes from ``cpu_inst`` when present, else from the last two stats' cumulative usage;
io and network rates from the last two stats. The sample's time is the last stat's
``timestamp``, so a cAdvisor that stopped updating yields old samples (docs/design.md §5 staleness).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import httpx
import numpy as np

from agents.collectors.failures import attempt
from agents.collectors.jsondoc import need, opt
from agents.collectors.telemetry import Collection
from agents.errors import ConfigError, TelemetryError
from agents.model import CpuThrottling, UsageSample, Workload
from agents.units import bytes_per_s, mcpu_from_nanocores, mcpu_from_ns, unix_s_from_rfc3339, us_from_ns
from kalena_engine.resources import CPU, DISK_READ, DISK_WRITE, N_DIMS, NET_IN, NET_OUT, RAM


def _disk(stat: Mapping[str, Any], source: str) -> tuple[float, float] | None:
    entries = opt(stat, "diskio.io_service_bytes", "list", source=source)
    if entries is None:
        return None
    read = write = 0.0
    for i, entry in enumerate(entries):
        stats = need(entry, "stats", "object", source=f"{source}#diskio.io_service_bytes[{i}]")
        read += float(stats.get("Read", 0))
        write += float(stats.get("Write", 0))
    return read, write


def _net(stat: Mapping[str, Any], source: str) -> tuple[float, float] | None:
    interfaces = opt(stat, "network.interfaces", "list", source=source)
    if interfaces:
        rx = sum(need(x, "rx_bytes", source=f"{source}#network.interfaces[{i}]") for i, x in enumerate(interfaces))
        tx = sum(need(x, "tx_bytes", source=f"{source}#network.interfaces[{i}]") for i, x in enumerate(interfaces))
        return rx, tx
    rx = opt(stat, "network.rx_bytes", source=source)
    if rx is None:
        return None
    return rx, need(stat, "network.tx_bytes", source=source)


def sample_from_stats(stats: Sequence[Mapping[str, Any]], workload_id: str, *, source: str) -> UsageSample:
    """One :class:`~agents.model.UsageSample` from a container's stats list (oldest first).

    Raises:
        TelemetryError: for an empty list or a malformed stat, naming ``source`` and the field.
    """
    if not stats:
        raise TelemetryError("no stats", source=source, field="stats")
    last = stats[-1]
    ts = unix_s_from_rfc3339(need(last, "timestamp", "string", source=source), source=source, field="stats[-1].timestamp")
    usage = np.full(N_DIMS, math.nan)
    usage[RAM] = need(last, "memory.working_set", source=source)
    inst = opt(last, "cpu_inst.usage.total", source=source)
    if inst is not None:
        usage[CPU] = mcpu_from_nanocores(inst)
    throttling = None
    if opt(last, "cpu.cfs", "object", source=source) is not None:
        throttling = CpuThrottling(int(need(last, "cpu.cfs.periods", source=source)),
                                   int(need(last, "cpu.cfs.throttled_periods", source=source)),
                                   us_from_ns(need(last, "cpu.cfs.throttled_time", source=source)))
    if len(stats) >= 2:
        prev = stats[-2]
        prev_ts = unix_s_from_rfc3339(need(prev, "timestamp", "string", source=source), source=source,
                                      field="stats[-2].timestamp")
        dt = ts - prev_ts
        if dt > 0:
            if inst is None:
                now_cpu = opt(last, "cpu.usage.total", source=source)
                prev_cpu = opt(prev, "cpu.usage.total", source=source)
                if now_cpu is not None and prev_cpu is not None and now_cpu >= prev_cpu:
                    usage[CPU] = mcpu_from_ns(now_cpu - prev_cpu, dt)
            disk, prev_disk = _disk(last, source), _disk(prev, source)
            if disk and prev_disk:
                usage[DISK_READ] = bytes_per_s(disk[0] - prev_disk[0], dt)
                usage[DISK_WRITE] = bytes_per_s(disk[1] - prev_disk[1], dt)
            net, prev_net = _net(last, source), _net(prev, source)
            if net and prev_net:
                usage[NET_IN] = bytes_per_s(net[0] - prev_net[0], dt)
                usage[NET_OUT] = bytes_per_s(net[1] - prev_net[1], dt)
    memory_usage = opt(last, "memory.usage", source=source)
    return UsageSample(workload_id, ts, usage, math.nan if memory_usage is None else memory_usage, throttling)


def parse_v13_container(doc: Mapping[str, Any], workload_id: str, *, source: str) -> UsageSample:
    """A v1.3 ``ContainerInfo`` document → sample (see module docstring)."""
    need(doc, "name", "string", source=source)
    return sample_from_stats(need(doc, "stats", "list", source=source), workload_id, source=source)


def parse_v20_stats(doc: Mapping[str, Any], workload_id: str, name: str, *, source: str) -> UsageSample:
    """A v2.0 ``{name: [ContainerStats…]}`` document → the sample for container ``name``."""
    if not isinstance(doc, Mapping):
        raise TelemetryError(f"expected an object keyed by container name, got {type(doc).__name__}", source=source)
    if name not in doc:
        raise TelemetryError(f"no stats for {name!r} (has: {', '.join(sorted(doc)) or 'none'})", source=source)
    stats = doc[name]
    if not isinstance(stats, list):
        raise TelemetryError("expected a list of stats", source=source, field=name)
    return sample_from_stats(stats, workload_id, source=source)


class CadvisorCollector:
    """Telemetry from a cAdvisor on the node, one request per workload cgroup.

    Args:
        base_url: e.g. ``http://127.0.0.1:8080``.
        api: ``v2.0`` (default) or ``v1.3``.
        client: an ``httpx.Client`` (tests pass their own; default one with a 2 s timeout).
    """

    name = "cadvisor"

    def __init__(self, base_url: str, api: str = "v2.0", client: httpx.Client | None = None) -> None:
        if api not in ("v1.3", "v2.0"):
            raise ConfigError(f"unknown cAdvisor API {api!r}", source="--cadvisor-api", accepted="v1.3, v2.0")
        self.base_url = base_url.rstrip("/")
        self.api = api
        self.client = client or httpx.Client(timeout=2.0)

    def url_for(self, cgroup: str) -> str:
        name = "/" + cgroup.strip("/")
        if self.api == "v1.3":
            return f"{self.base_url}/api/v1.3/containers{name}"
        return f"{self.base_url}/api/v2.0/stats{name}?type=name&count=2"

    def sample(self, workload: Workload) -> UsageSample:
        """Fetch and parse one workload's stats.

        Raises:
            httpx.HTTPError: transport errors or a non-2xx status.
            TelemetryError: malformed JSON (raised from the decode error, which tells an empty or
                cut-short body from a malformed one) or document.
        """
        url = self.url_for(workload.cgroup)
        response = self.client.get(url)
        response.raise_for_status()
        try:
            doc = response.json()
        except ValueError as exc:
            raise TelemetryError(f"not JSON: {exc}", source=url) from exc
        if self.api == "v1.3":
            return parse_v13_container(doc, workload.id, source=url)
        return parse_v20_stats(doc, workload.id, "/" + workload.cgroup.strip("/"), source=url)

    def collect(self, workloads: Sequence[Workload], now_s: float, *, memory_only: bool = False) -> Collection:
        out = Collection()
        for workload in workloads:   # a 404 is a container that is gone: cause ``gone``, in ``out.gone``
            out.add(workload.id, attempt(self.name, workload.id, self.url_for(workload.cgroup),
                                         lambda w=workload: self.sample(w)))
        return out

    def exclude_psi(self, workload_ids: set[str]) -> None:
        """Remote sources read no PSI files of their own: nothing to exclude."""

    def forget(self, workload_id: str) -> None:
        """Nothing to forget: rates come from cAdvisor's own history."""
