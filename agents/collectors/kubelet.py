"""Kubelet telemetry: ``GET /stats/summary`` (``k8s.io/kubelet/pkg/apis/stats/v1alpha1``
``Summary``) and the authenticated HTTP client discovery shares (``GET /pods``).

Fields used from the summary::

    node.nodeName, node.memory.{time,workingSetBytes}, node.{cpu,memory,io}.psi
    pods[].podRef.{namespace,name,uid}
    pods[].cpu.{time,usageNanoCores}                   nanocores (rate)
    pods[].memory.{time,workingSetBytes,usageBytes}    bytes
    pods[].network.{time,rxBytes,txBytes}              cumulative bytes
    pods[].ephemeral-storage.usedBytes                 bytes
    pods[].{cpu,memory}.psi.{some,full}.{avg10,avg60,avg300,total}   (KEP-4205, where enabled)

A pod's sample time is the older of its cpu and memory ``time``: a kubelet whose housekeeping
stalled hands out old samples, which the agent treats as stale (case C1).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import numpy as np

from agents.collectors.failures import MALFORMED, READ_ERROR, CollectorFailure, attempt
from agents.collectors.jsondoc import need, opt
from agents.collectors.psi import PsiLine, PsiStats
from agents.collectors.rates import RateTracker
from agents.collectors.telemetry import Collection
from agents.errors import TelemetryError
from agents.model import NodeReading, UsageSample, Workload
from agents.units import mcpu_from_nanocores, unix_s_from_rfc3339
from kalena_engine.resources import CPU, N_DIMS, NET_IN, NET_OUT, RAM, STORAGE


def parse_summary_psi(block: Any, *, source: str, field: str) -> PsiStats | None:
    """A summary ``psi`` block → :class:`~agents.collectors.psi.PsiStats` (``None`` if absent)."""
    psi = opt(block, "psi", "object", source=source)
    if psi is None:
        return None

    def line(kind: str) -> PsiLine | None:
        data = opt(psi, kind, "object", source=source)
        if data is None:
            return None
        where = f"{source}#{field}.psi.{kind}"
        return PsiLine(need(data, "avg10", source=where), need(data, "avg60", source=where),
                       need(data, "avg300", source=where), int(need(data, "total", source=where)))

    some = line("some")
    if some is None:
        raise TelemetryError("psi block without 'some'", source=source, field=f"{field}.psi")
    return PsiStats(some, line("full"))


@dataclass(frozen=True)
class KubeletSummary:
    """A parsed summary: node reading and one sample per pod keyed ``namespace/name``."""

    node_name: str
    node: NodeReading | None
    pods: dict[str, UsageSample] = field(default_factory=dict)


def _time(block: Any, path: str, source: str) -> float | None:
    text = opt(block, path, "string", source=source)
    return None if text is None else unix_s_from_rfc3339(text, source=source, field=path)


def _pod_key(pod: Any) -> str | None:
    ref = pod.get("podRef") if isinstance(pod, Mapping) else None
    if isinstance(ref, Mapping) and isinstance(ref.get("namespace"), str) and isinstance(ref.get("name"), str):
        return f"{ref['namespace']}/{ref['name']}"
    return None


def _parse_pod(pod: Any, where: str, rates: RateTracker) -> UsageSample | None:
    """One ``pods[i]`` entry → its sample keyed ``namespace/name`` (``None`` without cpu or memory time)."""
    key = f"{need(pod, 'podRef.namespace', 'string', source=where)}/{need(pod, 'podRef.name', 'string', source=where)}"
    usage = np.full(N_DIMS, math.nan)
    times = []
    cpu_ts = _time(pod, "cpu.time", where)
    if cpu_ts is not None:
        times.append(cpu_ts)
        nano = opt(pod, "cpu.usageNanoCores", source=where)
        if nano is not None:
            usage[CPU] = mcpu_from_nanocores(nano)
    mem_ts = _time(pod, "memory.time", where)
    memory_usage = math.nan
    if mem_ts is not None:
        times.append(mem_ts)
        ws = opt(pod, "memory.workingSetBytes", source=where)
        if ws is not None:
            usage[RAM] = ws
        memory_usage = opt(pod, "memory.usageBytes", source=where) or math.nan
    if not times:
        return None
    net_ts = _time(pod, "network.time", where)
    if net_ts is not None:
        usage[NET_IN] = rates.rate(f"{key}/rx", net_ts, opt(pod, "network.rxBytes", source=where))
        usage[NET_OUT] = rates.rate(f"{key}/tx", net_ts, opt(pod, "network.txBytes", source=where))
    used = opt(pod, "ephemeral-storage.usedBytes", source=where)
    if used is not None:
        usage[STORAGE] = used
    psi = {}
    for resource in ("cpu", "memory", "io"):
        block = opt(pod, resource, "object", source=where)
        stats = parse_summary_psi(block, source=where, field=resource) if block else None
        if stats is not None:
            psi[resource] = stats
    return UsageSample(key, min(times), usage, memory_usage, None, psi)


def parse_kubelet_summary(doc: Mapping[str, Any], *, source: str, rates: RateTracker | None = None,
                          skipped: list[tuple[str, TelemetryError]] | None = None) -> KubeletSummary:
    """Parse a ``/stats/summary`` document (see module docstring).

    Args:
        rates: tracker for cumulative network counters across calls (fresh one if ``None``:
            network rates then stay ``NaN``).
        skipped: when given, a malformed ``pods[i]`` entry is appended here as ``(namespace/name
            or "pods[i]", error)`` and left out, the other pods parsed; when ``None`` it raises.

    Raises:
        TelemetryError: naming ``source`` and the field (e.g. ``pods[3].memory.workingSetBytes``).
    """
    rates = rates or RateTracker()
    node_name = need(doc, "node.nodeName", "string", source=source)
    node = None
    node_ts = _time(doc, "node.memory.time", source)
    if node_ts is not None:
        psi = {}
        for resource in ("cpu", "memory", "io"):
            block = opt(doc, f"node.{resource}", "object", source=source)
            stats = parse_summary_psi(block, source=source, field=f"node.{resource}") if block else None
            if stats is not None:
                psi[resource] = stats
        node = NodeReading(node_ts, need(doc, "node.memory.workingSetBytes", source=source), psi)
    pods: dict[str, UsageSample] = {}
    for i, pod in enumerate(need(doc, "pods", "list", source=source)):
        where = f"{source}#pods[{i}]"
        try:
            parsed = _parse_pod(pod, where, rates)
        except TelemetryError as exc:
            if skipped is None:
                raise
            skipped.append((_pod_key(pod) or f"pods[{i}]", exc))
            continue
        if parsed is not None:
            pods[parsed.workload_id] = parsed
    return KubeletSummary(node_name, node, pods)


class KubeletClient:
    """HTTP(S) client for the node's kubelet (port 10250), authenticated with a bearer token.

    Args:
        base_url: e.g. ``https://127.0.0.1:10250``.
        token_file: service-account token path, re-read on every request (tokens rotate).
        verify: CA bundle path, ``True`` for the system store, ``False`` to skip verification.
        timeout_s: per request.
    """

    def __init__(self, base_url: str, *, token_file: str | None = None, verify: str | bool = True,
                 timeout_s: float = 5.0, transport: httpx.BaseTransport | None = None) -> None:
        self.base_url = base_url.rstrip("/")
        self.token_file = token_file
        self.client = httpx.Client(verify=verify, timeout=timeout_s, transport=transport)

    def get_json(self, path: str) -> Any:
        """GET ``path`` and decode JSON.

        Raises:
            httpx.HTTPError: transport error or non-2xx status.
            TelemetryError: the body is not JSON (raised from the decode error, which tells an
                empty or cut-short body from a malformed one).
        """
        headers = {}
        if self.token_file:
            headers["Authorization"] = "Bearer " + Path(self.token_file).read_text().strip()
        url = self.base_url + path
        response = self.client.get(url, headers=headers)
        response.raise_for_status()
        try:
            return response.json()
        except ValueError as exc:
            raise TelemetryError(f"not JSON: {exc}", source=url) from exc


class KubeletTelemetry:
    """Telemetry from ``/stats/summary``, one request per round for every pod. A summary that
    cannot be read at all (cut short, refused) is one failure of the whole source; a malformed
    pod entry is a failure of that pod only, the other pods keep their samples."""

    name = "kubelet_summary"

    def __init__(self, client: KubeletClient) -> None:
        self.client = client
        self.rates = RateTracker()
        self.last_node: NodeReading | None = None

    def collect(self, workloads: Sequence[Workload], now_s: float, *, memory_only: bool = False) -> Collection:
        out = Collection()
        url = self.client.base_url + "/stats/summary"
        skipped: list[tuple[str, TelemetryError]] = []
        summary = attempt(self.name, "", url, lambda: parse_kubelet_summary(
            self.client.get_json("/stats/summary"), source=url, rates=self.rates, skipped=skipped),
            on_missing=READ_ERROR)   # a missing file here is the token file, not a workload
        if isinstance(summary, CollectorFailure):
            out.failures.append(summary)
            return out
        self.last_node = summary.node
        wanted = {w.id for w in workloads}
        for key, exc in skipped:
            out.failures.append(CollectorFailure(self.name, key if key in wanted else "", url, MALFORMED, str(exc)))
        for workload in workloads:
            out.add(workload.id, summary.pods.get(workload.id))
        return out

    def exclude_psi(self, workload_ids: set[str]) -> None:
        """Remote sources read no PSI files of their own: nothing to exclude."""

    def forget(self, workload_id: str) -> None:
        self.rates.forget(f"{workload_id}/")
