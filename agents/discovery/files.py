"""Workloads declared in a file: process groups in cgroups the operator (or a test, or the
benchmark) created — systemd slices, bare cgroups. JSON or YAML::

    workloads:
      - id: web                       # required, unique
        cgroup: kalena/web            # required, relative to every hierarchy root
        labels: {kalena.naughtian.io/tier: service}
        annotations: {kalena.naughtian.io/priority: "0"}
        requests: {cpu: 500m, memory: 64Mi}
        limits: {cpu: "1", memory: 128Mi}
        start_time: 1732860000.0      # optional Unix s; default: when the agent first saw it
        termination_grace_period_seconds: 30   # optional, default 30
        daemonset: false              # optional: never throttled or evicted

The file is re-read when its modification time changes. A malformed file keeps the last good
list and reports the error (file, entry, field, accepted keys); at start-up it is fatal.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from agents.discovery.base import Discovery
from agents.discovery.labels import classify
from agents.errors import ConfigError, DiscoveryError
from agents.model import KIND_PROCESS, Workload
from agents.units import k8s_resources_vector

ENTRY_KEYS = ("id", "cgroup", "labels", "annotations", "requests", "limits", "start_time",
              "termination_grace_period_seconds", "daemonset")


def _string_map(value: Any, source: str, field: str) -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, Mapping) or not all(isinstance(k, str) for k in value):
        raise ConfigError("expected a mapping of strings", source=source, field=field)
    return {k: str(v) for k, v in value.items()}


def parse_workloads_file(text: str, *, source: str, first_seen: Mapping[str, float], now_s: float) -> Discovery:
    """Parse a workloads file.

    Args:
        first_seen: start time to use for entries without ``start_time`` (by id); unknown ids
            start at ``now_s``.

    Raises:
        ConfigError: the document is not a mapping with a ``workloads`` list, an entry has an
            unknown key, a missing ``id``/``cgroup``, a duplicate id, or a malformed number —
            naming the file, the entry index and the field.
    Label/annotation/quantity problems are per-workload errors in :attr:`Discovery.errors`.
    """
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        raise ConfigError(f"not valid JSON/YAML: {getattr(exc, 'problem', exc)}", source=source,
                          line=mark.line + 1 if mark else None) from None
    if not isinstance(doc, Mapping) or not isinstance(doc.get("workloads"), list):
        raise ConfigError("expected a mapping with a 'workloads' list", source=source, field="workloads")
    unknown_top = sorted(set(doc) - {"workloads"})
    if unknown_top:
        raise ConfigError(f"unknown key {unknown_top[0]!r}", source=source, accepted="workloads")
    out = Discovery()
    seen: set[str] = set()
    for i, entry in enumerate(doc["workloads"]):
        where = f"workloads[{i}]"
        if not isinstance(entry, Mapping):
            raise ConfigError("expected a mapping", source=source, field=where)
        unknown = sorted(set(entry) - set(ENTRY_KEYS))
        if unknown:
            raise ConfigError(f"unknown key {unknown[0]!r}", source=source, field=where, accepted=", ".join(ENTRY_KEYS))
        for key in ("id", "cgroup"):
            if not isinstance(entry.get(key), str) or not entry[key].strip():
                raise ConfigError(f"{key} must be a non-empty string", source=source, field=f"{where}.{key}")
        wid = entry["id"]
        if wid in seen:
            raise ConfigError(f"duplicate id {wid!r}", source=source, field=f"{where}.id")
        seen.add(wid)
        labels = _string_map(entry.get("labels"), source, f"{where}.labels")
        annotations = _string_map(entry.get("annotations"), source, f"{where}.annotations")
        numbers = {}
        for key, default in (("start_time", first_seen.get(wid, now_s)), ("termination_grace_period_seconds", 30.0)):
            value = entry.get(key, default)
            if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value < 0:
                raise ConfigError(f"{value!r} is not a number ≥ 0", source=source, field=f"{where}.{key}")
            numbers[key] = float(value)
        daemonset = entry.get("daemonset", False)
        if not isinstance(daemonset, bool):
            raise ConfigError(f"{daemonset!r} is not true or false", source=source, field=f"{where}.daemonset")
        wsource = f"{source}#{where}"
        errors: list[str] = []
        kind = classify(labels, annotations, source=wsource, daemonset=daemonset, errors=errors)
        out.errors.extend(errors)
        try:
            request = k8s_resources_vector(entry.get("requests"), source=wsource, field="requests")
            limit = k8s_resources_vector(entry.get("limits"), source=wsource, field="limits", missing=math.inf)
        except DiscoveryError as exc:
            out.errors.append(str(exc))
            continue
        out.workloads.append(Workload(
            id=wid, name=wid, kind=KIND_PROCESS, tier=kind.tier, priority=kind.priority,
            request=request, limit=limit, start_s=numbers["start_time"],
            grace_s=numbers["termination_grace_period_seconds"], cgroup=entry["cgroup"].strip("/"),
            slack_cpu=kind.slack_cpu, slack_memory=kind.slack_memory,
            reclaim_disabled=kind.reclaim_disabled, startup_grace_s=kind.startup_grace_s,
            source=f"file:{source}", labels=labels,
        ))
    return out


class FileSource:
    """Discovery from a workloads file (see module docstring)."""

    name = "file"

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._mtime: float | None = None
        self._last = Discovery()
        self._first_seen: dict[str, float] = {}

    def load(self, now_s: float) -> Discovery:
        """Parse the file now (raises :class:`~agents.errors.ConfigError` if it is malformed or
        unreadable)."""
        try:
            stat = self.path.stat()
            text = self.path.read_text()
        except OSError as exc:
            raise ConfigError(f"cannot read workloads file: {exc.strerror or exc}", source=str(self.path)) from None
        result = parse_workloads_file(text, source=str(self.path), first_seen=self._first_seen, now_s=now_s)
        for workload in result.workloads:
            self._first_seen.setdefault(workload.id, workload.start_s)
        self._mtime = stat.st_mtime_ns
        self._last = result
        return result

    def discover(self, now_s: float) -> Discovery:
        try:
            mtime = self.path.stat().st_mtime_ns
        except OSError as exc:
            return Discovery(list(self._last.workloads), [f"{self.path}: {exc.strerror or exc}; keeping the last good list"])
        if mtime == self._mtime:
            return Discovery(list(self._last.workloads), [])
        try:
            return self.load(now_s)
        except ConfigError as exc:
            self._mtime = mtime
            return Discovery(list(self._last.workloads), [f"{exc}; keeping the last good list"])
