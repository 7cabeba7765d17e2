"""The proposal's live metrics 4, 5 and 7 from a running (or just-run) lab: what the kernel and
the agents recorded, over a window (``kalena lab metrics``, docs/lab.md "Live metrics").

* **Metric 4 — cpu scheduling delay by node utilisation.** From per-thread
  ``/proc/<tid>/schedstat``, sampled every second by the lab's sampler
  (:mod:`agents.lab.sampler`) for every container thread of every node: the share of runnable
  time (on a cpu + waiting) spent in waits longer than 5 ms, per tier, bucketed by the node's cpu
  utilisation that second (cpu used ÷ the node's quota, 0–20 … 80–100 %, and ``>100`` for the
  rounding of a full quota). schedstat, not PSI, because the metric is about *how long a thread
  waits*: PSI's ``some`` counts the time at least one task of the group was waiting, whatever the
  length of each wait, so it cannot tell a 1 ms wait from a 50 ms one; schedstat gives each
  thread's waiting time and dispatch count (the sampler's 5 ms test is on the mean wait per
  dispatch in the second, see its doc). The node's PSI ``some`` share is reported beside it, per
  bucket, as the cross-check. Waiting includes the time the node's (or the pod's) CFS quota kept
  a thread throttled — what the workload feels.
* **Metric 5 — PSI notification → throttle or eviction.** The agents' ``throttle``,
  ``cpu_weight`` (the agent's first answer to cpu PSI: batch to the minimum weight) and ``evict``
  actions triggered by a pressure signal (``trigger`` source ``psi-trigger``,
  ``eventfd-threshold`` or ``poll``), as the console stored them (``telemetry_mitigationevent``):
  ``result.latency_ms`` is the agent's own measure from the moment it learned of the signal
  (``PressureEvent.detected_mono``) to the cgroup write or the SIGTERM done; ``result.detected_s``
  is the signal's Unix time. p50 / p99 / max and the count, per action.
* **Metric 7 — batch forward progress.** For every batch pod container that ended inside the
  window with a work contract (``lab.kalena.naughtian.io/work``): completion-time inflation =
  wall runtime (the engine's ``StartedAt`` → ``FinishedAt``) ÷ the contract's ``duration_s``
  (the trace's duration divided by the speed, floored at the slice's minimum wall time); and for
  every batch pod container seen, its cumulative throttled time (the pod container's cgroup
  ``cpu.stat`` ``throttled_time``). Both as distributions: count, mean, p0 p10 p25 p50 p75 p90
  p99 p100, and the values; throttled time is summed over a pod's containers and attempts.

Reads ``<state dir>/metrics.jsonl`` (the sampler's) and the lab's database; nothing is changed.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from agents.lab.invariants import database_url, query

BUCKETS = ((0.0, 0.2, "0-20%"), (0.2, 0.4, "20-40%"), (0.4, 0.6, "40-60%"), (0.6, 0.8, "60-80%"),
           (0.8, 1.0, "80-100%"), (1.0, math.inf, ">100%"))
QUANTILES = (0, 10, 25, 50, 75, 90, 99, 100)
PRESSURE_SOURCES = ("psi-trigger", "eventfd-threshold", "poll")


def state_dir_of(state: dict[str, Any]) -> Path:
    return Path(state["logs"]).parent


def distribution(values: list[float]) -> dict[str, Any]:
    """``count``, ``mean``, ``p<q>`` for q in :data:`QUANTILES` (linear interpolation) and the
    sorted ``values``; ``count`` 0 and ``None`` figures when empty."""
    xs = sorted(float(v) for v in values)
    out: dict[str, Any] = {"count": len(xs), "mean": sum(xs) / len(xs) if xs else None}
    for q in QUANTILES:
        if not xs:
            out[f"p{q}"] = None
            continue
        pos = (len(xs) - 1) * q / 100
        lo, hi = math.floor(pos), math.ceil(pos)
        out[f"p{q}"] = xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)
    out["values"] = [round(x, 4) for x in xs]
    return out


def _bucket(util: float) -> str:
    return next(label for lo, hi, label in BUCKETS if lo <= util < hi)


def read_metrics(path: Path, since_s: float, until_s: float) -> tuple[list[dict], dict[str, dict]]:
    """The sampler's ticks in ``[since_s, until_s]`` and the last line of each pod container
    seen in it (keyed by container id)."""
    ticks, pods = [], {}
    if not path.is_file():
        return ticks, pods
    with open(path, encoding="utf-8") as f:
        for line in f:
            try:
                row = json.loads(line)
            except ValueError:       # a line being written
                continue
            if not since_s <= row.get("t", -1) <= until_s:
                continue
            if row["type"] == "tick":
                ticks.append(row)
            elif row["type"] == "pod":
                pods[row["container_id"]] = row
    return ticks, pods


def metric4(ticks: list[dict]) -> dict[str, Any]:
    """Metric 4 from the sampler's ticks (module doc)."""
    acc: dict[str, dict[str, Any]] = {}
    for tick in ticks:
        for node in tick["nodes"].values():
            util = node.get("util")
            if util is None:
                continue
            b = acc.setdefault(_bucket(util), {"node_seconds": 0.0, "psi_some_us": 0, "tiers": {}})
            b["node_seconds"] += tick.get("dt") or 0.0
            b["psi_some_us"] += node.get("psi_some_us") or 0
            for tier, t in node.get("tiers", {}).items():
                for name in (tier, "all"):
                    a = b["tiers"].setdefault(name, {"run_ns": 0, "wait_ns": 0, "long_wait_ns": 0})
                    for k in a:
                        a[k] += t.get(k, 0)
    out = {}
    for _, _, label in BUCKETS:
        b = acc.get(label)
        if b is None:
            continue
        tiers = {}
        for tier, a in b["tiers"].items():
            runnable = a["run_ns"] + a["wait_ns"]
            tiers[tier] = {"runnable_s": runnable / 1e9, "wait_s": a["wait_ns"] / 1e9,
                           "wait_over_5ms_s": a["long_wait_ns"] / 1e9,
                           "share_waiting_over_5ms": a["long_wait_ns"] / runnable if runnable else None}
        out[label] = {"node_seconds": round(b["node_seconds"], 3),
                      "psi_some_share": (b["psi_some_us"] / 1e6 / b["node_seconds"]) if b["node_seconds"] else None,
                      "tiers": tiers}
    return {"source": "per-thread /proc/<tid>/schedstat (wait > 5 ms: mean wait per dispatch within a 1 s sample), "
                      "the node's cpu.pressure some share beside it", "buckets": out}


def metric5(state: dict[str, Any], since_s: float, until_s: float) -> dict[str, Any]:
    """Metric 5 from the agents' actions the console stored (module doc)."""
    rows = query(database_url(state), "SELECT m.action, m.trigger_source, m.ts, m.result, n.name AS node "
                                      "FROM telemetry_mitigationevent m JOIN inventory_node n ON n.id = m.node_id "
                                      "WHERE m.ts >= %s AND m.ts <= %s AND m.action IN ('throttle', 'cpu_weight', 'evict')",
                 (since_s, until_s))
    by_action: dict[str, list[float]] = {}
    sources: dict[str, int] = {}
    for r in rows:
        if r["trigger_source"] not in PRESSURE_SOURCES:
            continue
        result = r["result"] if isinstance(r["result"], dict) else json.loads(r["result"] or "{}")
        latency = result.get("latency_ms")
        if latency is None:
            continue
        by_action.setdefault(r["action"], []).append(float(latency))
        by_action.setdefault("all", []).append(float(latency))
        sources[r["trigger_source"]] = sources.get(r["trigger_source"], 0) + 1
    return {"source": "the agents' throttle/cpu_weight/evict actions triggered by a pressure signal; result.latency_ms = "
                      "signal detected → cgroup write or SIGTERM done", "by_trigger_source": sources,
            "latency_ms": {k: distribution(v) for k, v in sorted(by_action.items())}}


def _batch_rows(state: dict[str, Any]) -> list[dict[str, Any]]:
    try:
        return query(database_url(state), "SELECT b.uid, b.outcome, b.state, w.name, w.namespace FROM scheduling_batchpod b "
                                          "JOIN inventory_workload w ON w.id = b.workload_id")
    except Exception:  # noqa: BLE001 - no database (yet): exit codes alone decide
        return []


def metric7(pods: dict[str, dict], batch_rows: list[dict[str, Any]] = ()) -> dict[str, Any]:
    """Metric 7 from the sampler's pod lines (module doc). A container counts towards the
    inflation when it completed its work: exit code 0, or — its engine removed it before the
    sampler could ask (Docker mode) — it is the pod's last container and Kalena recorded the pod
    ``succeeded`` (``batch_rows``: uid, name, namespace, outcome). A container stopped before
    its work was done (exit 143: an eviction, its engine stopped) is counted apart."""
    by_uid = {r["uid"]: r for r in batch_rows if r.get("uid")}
    by_name = {}
    for r in batch_rows:
        by_name[r["name"]] = r
        if r.get("namespace"):
            by_name[f"{r['namespace']}/{r['name']}"] = r
    batch = [p for p in pods.values() if p.get("tier") == "batch"]
    last: dict[str, dict] = {}
    for pod in batch:
        key = str(pod.get("uid") or pod.get("pod"))
        if key not in last or pod.get("last_seen", 0) > last[key].get("last_seen", 0):
            last[key] = pod
    inflation, rows, cut_short = [], [], 0
    container_ns: dict[str, int] = {}
    pod_ns: dict[str, int] = {}
    for pod in batch:
        key = str(pod.get("uid") or pod.get("pod"))
        # a pod's containers and attempts (a requeued pod runs again) add up; the pod group's own count is cumulative
        container_ns[key] = container_ns.get(key, 0) + (pod.get("throttled_ns") or 0)
        if pod.get("pod_throttled_ns") is not None:
            pod_ns[key] = max(pod_ns.get(key, 0), pod["pod_throttled_ns"])
        duration = pod.get("work_duration_s")
        if not pod.get("ended") or not duration:
            continue
        if pod.get("exit_code") is not None:
            succeeded = pod["exit_code"] == 0
        else:
            row = by_uid.get(pod.get("uid")) if pod.get("uid") else by_name.get(pod.get("pod"))
            succeeded = bool(row) and row.get("outcome") == "succeeded" and last[key] is pod
        start = pod.get("started_at") or pod.get("first_seen")
        end = pod.get("finished_at") or pod.get("last_seen")
        if start is None or end is None or end <= start:
            continue
        if not succeeded:
            cut_short += 1
        else:
            inflation.append((end - start) / duration)
        rows.append({"pod": pod.get("pod"), "node": pod.get("node"), "wall_s": round(end - start, 3),
                     "work_duration_s": duration, "inflation": round((end - start) / duration, 4) if succeeded else None,
                     "completed": succeeded, "throttled_s": round((pod.get("throttled_ns") or 0) / 1e9, 3),
                     "exit_code": pod.get("exit_code"), "timed_by": "engine" if pod.get("finished_at") else "sampler"})
    throttled = [max(container_ns[k], pod_ns.get(k, 0)) / 1e9 for k in container_ns]
    return {"source": "the sampler's pod containers: engine StartedAt→FinishedAt ÷ the work contract's duration_s; "
                      "cgroup cpu.stat throttled_time (the pod group's in Kubernetes mode)",
            "completion_inflation": distribution(inflation), "stopped_before_done": cut_short,
            "throttled_s_per_pod": distribution(throttled), "pods": rows}


def collect(state: dict[str, Any], since_s: float, until_s: float) -> dict[str, Any]:
    """Metrics 4, 5 and 7 (module doc) of the lab ``state`` over ``[since_s, until_s]`` (Unix s).

    Returns ``{"window": {"since_s", "until_s", "ticks"}, "metric4": …, "metric5": …,
    "metric7": …}``; a metric without data has empty buckets / ``count`` 0.

    Raises:
        ValueError: ``until_s`` before ``since_s``.
    """
    if until_s < since_s:
        raise ValueError(f"until_s {until_s} is before since_s {since_s}")
    ticks, pods = read_metrics(state_dir_of(state) / "metrics.jsonl", since_s, until_s)
    return {"window": {"since_s": since_s, "until_s": until_s, "ticks": len(ticks)},
            "metric4": metric4(ticks), "metric5": metric5(state, since_s, until_s), "metric7": metric7(pods, _batch_rows(state))}


def _fmt(x: float | None, spec: str = ".3f") -> str:
    return "—" if x is None else format(x, spec)


def format_metrics(report: dict[str, Any]) -> str:
    """``kalena lab metrics -o table``."""
    w = report["window"]
    lines = [f"live metrics over {w['until_s'] - w['since_s']:.0f} s ({w['ticks']} sampler ticks)", "",
             "metric 4 — share of runnable time waiting > 5 ms (schedstat), by node cpu utilisation:",
             f"  {'bucket':<9} {'node·s':>8} {'PSI some':>9} {'all':>8} {'prod':>8} {'batch':>8}"]
    for label, b in report["metric4"]["buckets"].items():
        t = b["tiers"]
        lines.append(f"  {label:<9} {b['node_seconds']:>8.1f} {_fmt(b['psi_some_share'], '.2%'):>9} "
                     + " ".join(f"{_fmt((t.get(k) or {}).get('share_waiting_over_5ms'), '.2%'):>8}"
                                for k in ("all", "production", "batch")))
    lines += ["", "metric 5 — pressure signal → throttle / eviction (ms):"]
    for action, d in report["metric5"]["latency_ms"].items():
        lines.append(f"  {action:<9} n={d['count']:<5} p50 {_fmt(d['p50'], '.1f')}  p99 {_fmt(d['p99'], '.1f')}  "
                     f"max {_fmt(d['p100'], '.1f')}")
    if not report["metric5"]["latency_ms"]:
        lines.append("  no pressure-triggered throttle or eviction in the window")
    m7 = report["metric7"]
    lines += ["", "metric 7 — batch forward progress:"]
    for key, title in (("completion_inflation", "completion inflation (wall ÷ scaled trace duration)"),
                       ("throttled_s_per_pod", "cumulative throttled time per batch pod (s)")):
        d = m7[key]
        lines.append(f"  {title}: n={d['count']}  " + "  ".join(f"p{q} {_fmt(d[f'p{q}'], '.2f')}" for q in QUANTILES))
    lines.append(f"  batch containers stopped before their work was done (not in the inflation): {m7['stopped_before_done']}")
    return "\n".join(lines)
