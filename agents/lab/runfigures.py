"""The figures of a measured lab day and of its replay, side by side (docs/lab.md "A measured
day"). Pure but for reading the slice's files: a day collected by :func:`agents.lab.run.run_day`
in, figures, ratios, gates, a table and an HTML report out.

Every live figure is on the *simulated* clock (wall seconds × k), as the replay's are.

* ``reclaimed_fraction_cpu`` / ``_ram``: Σ_n X_n / Σ_n Σ_w q_w (docs/design.md §6) averaged over the
  day's steps, live from the batch pods' bound → ended intervals (the lab database) over the
  slice's production requests and post-Phase-0 capacities — the replay's own node table;
* ``batch_pod_hours``: Σ running batch pods × time (simulated hours);
* ``batch_evictions_per_100_pod_hours``: batch evictions × 100 / pod-hours, live the agents'
  ``evict`` actions on batch plus the batch pods the console's escalation evicted (an eviction
  storm drains the node; ``escalation: …`` outcomes), as the replay counts both (its
  ``priority`` and ``escalation`` evictions);
* ``production_evictions``: ``evict`` actions on service pods;
* ``production_oom_kills``: service containers the kubelet double saw ``OOMKilled`` (the
  kernel's own count per node, from each memory group's ``oom_kill``, beside it);
* ``blueprint_findings``: the last blueprint check's findings on every node (the replay: the
  blueprint verification's hard findings);
* ``psi_events`` / ``throttle_actions`` per node: the agents' actions triggered by PSI, and
  their ``throttle`` / ``cpu_weight`` / ``starvation_cap`` actions (the replay has no PSI: its
  node-steps of throttled contention stand beside);
* ``production_waited_node_steps``: node-steps where the node's cpu PSI ``some`` stall grew by
  ≥ 1 % of the step (``unified/<node>/cpu.pressure``), and of those the steps where the host's
  ``/proc/pressure/cpu`` ``some`` share was ≥ 50 % (host saturation, flagged apart); the replay's
  ``production_contention_node_steps`` beside;
* ``why_evicted``: every eviction with its node, workload, reason and numbers.

Gates: production evictions 0 in both; reclaimed cpu and batch evictions per 100 pod-hours
live ÷ replay within 0.8–1.25 (both 0 passes; a live figure over a replay 0 fails).
"""

from __future__ import annotations

import html
import json
import math
from typing import Any

import numpy as np

BAND = (0.8, 1.25)
WAIT_SHARE = 0.01
HOST_SATURATED = 0.5
THROTTLES = ("throttle", "cpu_weight", "starvation_cap")
#: the agents' trigger sources that are PSI (agents.pressure.events): a kernel PSI trigger, and
#: the polling fallback that reads PSI avg10 (the memory eventfd threshold is not PSI)
PSI_SOURCES = ("psi-trigger", "poll")
GATED = ("reclaimed_fraction_cpu", "batch_evictions_per_100_pod_hours")
EXPLAIN = {
    "reclaimed_fraction_ram": "memory is not the constraining dimension: batch is placed by cpu slack, and the "
                              "live ledgers read working sets the replay's memory series only approximate",
    "batch_pod_hours": "live pods start after the webhook, the scheduler pass and the kubelet double's container "
                       "start (seconds of wall time, × k simulated); throttled pods run longer live",
    "production_waited_node_steps": "the node's PSI counts every task of the node (batch included) and the lab's "
                                    "processes share the host's cores; the replay counts only production usage that "
                                    "does not fit beside admitted batch",
    "batch_evicted": "evictions are rare events: a handful either way moves the ratio far",
}


def explain(key: str, live: dict[str, Any], replay: dict[str, Any]) -> str:
    """Why ``key`` left the band, with the day's own numbers where they say it."""
    host = live.get("host_cpu_psi_some_avg10_mean")
    infl = live.get("run_time_inflation_p50")
    slow = (f"live batch pods ran {infl:g}× their duration (p50; the replay {replay.get('run_time_inflation_p50')}) "
            f"with the host's cpu PSI some at {host:g} % on average — the machine, not the node, was short of cpu"
            if infl and host is not None else "")
    # the side a slow machine pushes each figure to: more pod-hours and memory held, fewer placed/finished
    slower = {"batch_pod_hours": 1, "reclaimed_fraction_ram": 1, "run_time_inflation_p50": 1,
              "batch_placed": -1, "batch_completed": -1}
    r = ratio(live.get(key), replay.get(key))
    if key in slower and slow and r is not None and (r - 1.0) * slower[key] > 0:
        tail = {"batch_pod_hours": ": each pod held its place longer, so more pod-hours for less work",
                "batch_placed": ": pods held reclaimed capacity longer, so fewer new ones fit",
                "batch_completed": ": fewer pods finished within the day",
                "reclaimed_fraction_ram": ": the pods that did run held their memory requests longer",
                "run_time_inflation_p50": ""}[key]
        return slow + tail
    if key in slower and r is not None:
        return (f"live {r:.2f}× the replay on this figure, where a slow machine would push it the other way: "
                "the ledgers below say whether the console left batch less room than the replay or booked less "
                "of the room it had (free room and batch booked, per node)")
    if key == "production_waited_node_steps":
        sat = sum((live.get("host_saturated_node_steps_by_node") or {}).values())
        return (f"{sat} of {live.get(key)} node-steps had the host's cpu saturated (PSI some ≥ 50 %): the lab's "
                "processes share the machine's cores. " + EXPLAIN[key])
    if key == "batch_evicted":
        def where(side: dict[str, Any]) -> str:
            nodes: dict[str, int] = {}
            for e in side.get("why_evicted") or []:
                nodes[str(e.get("node"))] = nodes.get(str(e.get("node")), 0) + int(e.get("count", 1))
            return ", ".join(f"{n} {c}" for n, c in sorted(nodes.items())) or "none"
        return (f"live {live.get(key)} ({where(live)}), replay {replay.get(key)} ({where(replay)}): "
                + EXPLAIN[key] + " — the replay's sensitivity line says how far a fraction of a MiB moves it")
    return EXPLAIN.get(key, "")


def ratio(live: float | None, replay: float | None) -> float | None:
    """live ÷ replay; 1.0 when both are 0; None when only the replay is 0 or either is missing."""
    if live is None or replay is None:
        return None
    if replay == 0:
        return 1.0 if live == 0 else None
    return live / replay


def step_grid(start_s: float, steps: int, step_wall_s: float) -> np.ndarray:
    """``(steps,)`` wall times of the day's steps."""
    return start_s + np.arange(steps) * step_wall_s


def median_unaccounted(samples: list[dict[str, Any]], node_names: list[str], t0: float, t_end: float) -> np.ndarray | None:
    """``(n,)`` bytes: each node's median, over the day's samples, of the memory its pods group
    held outside every pod's row (the sampler's ``unaccounted_bytes``: the agent's
    ``unaccounted`` term, docs/design.md §7) — what the replay's nodes hold beside their pods.
    None when the day has no such samples (a day recorded before the sampler measured it).
    Example: samples 3, 5, 4 MiB on one node → 4 MiB."""
    values: list[list[float]] = [[] for _ in node_names]
    for row in samples:
        if not t0 <= float(row.get("ts", -1)) <= t_end:
            continue
        for i, name in enumerate(node_names):
            v = ((row.get("nodes") or {}).get(name) or {}).get("unaccounted_bytes")
            if v is not None:
                values[i].append(float(v))
    if not any(values):
        return None
    return np.array([float(np.median(v)) if v else 0.0 for v in values])


def _batch_held_bytes(pod: dict[str, Any], overhead_mib: float) -> float | None:
    """What the burner holds for a batch pod (bytes): its ``work`` figure held at most its memory
    limit (the webhook's resources annotation, else the container's, else the figure) less
    ``overhead_mib``; None for a pod without the work annotation."""
    from agents.lab.kubelet.spec import WORK_ANNOTATION
    from agents.orchestrators.kubernetes.batch_resources import RESOURCES_ANNOTATION, QuantityError, memory_bytes
    from kalena_engine.labslice.replay import burner_held_mib

    annotations = (pod.get("metadata") or {}).get("annotations") or {}
    try:
        figure = float(json.loads(annotations[WORK_ANNOTATION])["memory_mib"])
    except (KeyError, TypeError, ValueError):
        return None
    limit = figure * 2**20
    try:
        containers = json.loads(annotations[RESOURCES_ANNOTATION])["containers"]
        limit = float(memory_bytes(next(iter(containers.values()))["limits"]["memory"], field=RESOURCES_ANNOTATION))
    except (KeyError, TypeError, ValueError, StopIteration, QuantityError):
        for c in (pod.get("spec") or {}).get("containers") or []:
            raw = ((c.get("resources") or {}).get("limits") or {}).get("memory")
            try:
                limit = float(memory_bytes(raw, field="limits.memory")) if raw else limit
            except QuantityError:
                pass
    return float(burner_held_mib(np.array(figure), np.array(limit), overhead_mib)) * 2**20


def burner_own_bytes(day: dict[str, Any], overhead_mib: float) -> dict[str, Any] | None:
    """The pages the lab's burner holds beside its memory figure, measured on the day: for each
    batch pod the sampler saw (``pod_ws_bytes``, its pod group's working set as the agent reads
    it), the median of its working set less what the burner holds for it
    (:func:`_batch_held_bytes`), over the samples where it held at least half of that (its
    container running: a Completed pod's group stays, reading about 0); returns ``{"bytes":
    median over pods, "pods": count, "p10", "p90"}`` (bytes), or None when the day has no such
    samples (recorded before the sampler took them). Example: a pod holding 37 MiB for a 40 MiB figure whose group reads 37.7 MiB → 0.7 MiB."""
    held = {}
    for pod in day.get("pods") or []:
        uid = (pod.get("metadata") or {}).get("uid")
        value = _batch_held_bytes(pod, overhead_mib) if uid else None
        if value is not None:
            held[uid] = value
    seen: dict[str, list[float]] = {}
    for row in day.get("samples") or []:
        for entry in (row.get("nodes") or {}).values():
            for uid, ws in ((entry or {}).get("pod_ws_bytes") or {}).items():
                # running: a pod's group outlives its container (Completed pods stay), reading ~0
                if uid in held and float(ws) >= 0.5 * held[uid]:
                    seen.setdefault(uid, []).append(float(ws) - held[uid])
    per_pod = [float(np.median(v)) for v in seen.values() if v]
    if not per_pod:
        return None
    return {"bytes": float(np.median(per_pod)), "pods": len(per_pod), "p10": float(np.percentile(per_pod, 10)),
            "p90": float(np.percentile(per_pod, 90))}


def live_figures(day: dict[str, Any], *, node_names: list[str], capacity: np.ndarray, prod_request: np.ndarray,
                 step_s: float, steps: int, pods: list[dict] | None = None) -> dict[str, Any]:
    """The live day's figures (module doc). ``capacity`` / ``prod_request``: ``(n, 2)`` cpu mcpu
    and memory bytes per node in ``node_names`` order (the replay's node table); ``pods``: the
    final ``kubectl get pods -A`` items (production OOMs)."""
    speed = float(day["slice_summary"]["config"]["speed"])
    step_wall = step_s / speed
    t0 = float(day["play_start_s"])
    t_end = t0 + steps * step_wall
    times = step_grid(t0, steps, step_wall)
    index = {n: i for i, n in enumerate(node_names)}
    n = len(node_names)
    batch_req = np.zeros((steps, n, 2))
    pod_hours = 0.0
    for p in day["console"]["batch_pods"]:
        if p.get("bound_s") is None or p.get("node") not in index or not p.get("request"):
            continue
        start = max(float(p["bound_s"]), t0)
        end = min(float(p["ended_s"]) if p.get("ended_s") else t_end, t_end)
        if end <= start:
            continue
        pod_hours += (end - start) * speed / 3600.0
        # time-weighted over the step, as the replay's batch terms are: a pod ending mid-step
        # counts for the part of the step it held its request
        share = np.clip(np.minimum(times + step_wall, end) - np.maximum(times, start), 0.0, None) / step_wall
        batch_req[:, index[p["node"]], 0] += share * float(p["request"][0])
        batch_req[:, index[p["node"]], 1] += share * float(p["request"][1])
    total = prod_request[None, :, :] + batch_req
    reclaimed = np.maximum(0.0, total - capacity[None, :, :])
    frac = {}
    for d, name in ((0, "cpu"), (1, "ram")):
        den = total[:, :, d].sum(axis=1)
        frac[name] = float(np.mean(np.where(den > 0, reclaimed[:, :, d].sum(axis=1) / np.where(den > 0, den, 1), 0.0)))
    events = [e for e in day["console"]["events"] if t0 <= float(e["ts"]) <= t_end + 60]
    evictions = [e for e in events if e["action"] == "evict"]
    # the console's escalation evicts too (a storm drains the node): the replay counts those, so do we
    escalated = [p for p in day["console"]["batch_pods"]
                 if str(p.get("reason") or "").startswith("escalation") and p.get("ended_s")
                 and t0 <= float(p["ended_s"]) <= t_end + 60]
    evictions = evictions + [{"ts": float(p["ended_s"]), "node": p.get("node"), "workload": p["name"], "tier": "batch",
                              "reason": "escalation", "trigger_resource": None, "numbers": {"outcome": p["reason"]}}
                             for p in escalated]
    evictions.sort(key=lambda e: float(e["ts"]))
    batch_ev = [e for e in evictions if e.get("tier") != "service"]
    prod_ev = [e for e in evictions if e.get("tier") == "service"]
    psi_events = {name: 0 for name in node_names}
    throttles = {name: 0 for name in node_names}
    for e in events:
        if e["node"] in psi_events and e.get("trigger_source") in PSI_SOURCES:
            psi_events[e["node"]] += 1
        if e["node"] in throttles and e["action"] in THROTTLES:
            throttles[e["node"]] += 1
    waited, saturated = _waited(day["samples"], node_names, times, step_wall)
    prod_oom = 0
    for pod in pods or []:
        labels = pod["metadata"].get("labels") or {}
        if labels.get("kalena.naughtian.io/tier") != "service":
            continue
        for c in (pod.get("status") or {}).get("containerStatuses") or []:
            for st in (c.get("lastState") or {}, c.get("state") or {}):
                if (st.get("terminated") or {}).get("reason") == "OOMKilled":
                    prod_oom += 1
    findings = sum(len(nd.get("blueprint_violations") or []) for nd in day["console"]["nodes"])
    durations = _durations(day)
    inflation = sorted((float(p["ended_s"]) - float(p["bound_s"])) / durations[p["name"]]
                       for p in day["console"]["batch_pods"]
                       if p.get("bound_s") and p.get("ended_s") and p.get("outcome") == "succeeded"
                       and durations.get(p["name"]))
    host = [s["host_cpu"]["avg10"] for s in day["samples"] if s.get("host_cpu") and t0 <= s["ts"] <= t_end]
    return {
        "reclaimed_fraction_cpu": round(frac["cpu"], 6), "reclaimed_fraction_ram": round(frac["ram"], 6),
        "batch_pod_hours": round(pod_hours, 3), "batch_evicted": len(batch_ev),
        "batch_evicted_by_reason": {r: sum(1 for e in batch_ev if e["reason"] == r)
                                    for r in sorted({e["reason"] for e in batch_ev})},
        "batch_evictions_per_100_pod_hours": round(100.0 * len(batch_ev) / pod_hours, 4) if pod_hours > 0 else 0.0,
        "production_evictions": len(prod_ev), "production_oom_kills": prod_oom,
        "batch_placed": sum(1 for p in day["console"]["batch_pods"] if p.get("bound_s") and t0 <= float(p["bound_s"]) <= t_end),
        "batch_completed": sum(1 for p in day["console"]["batch_pods"] if p.get("outcome") == "succeeded"
                               and p.get("ended_s") and float(p["ended_s"]) <= t_end),
        "run_time_inflation_p50": round(float(np.median(inflation)), 3) if inflation else None,
        "host_cpu_psi_some_avg10_mean": round(float(np.mean(host)), 1) if host else None,
        "kernel_oom_kills_by_node": {k: sum(v.values()) for k, v in (day.get("oom") or {}).items()},
        "blueprint_findings": findings,
        "invariants": day.get("invariants"),
        "psi_events_by_node": psi_events, "throttle_actions_by_node": throttles,
        "production_waited_node_steps": int(sum(waited.values())),
        "production_waited_node_steps_by_node": waited,
        "host_saturated_node_steps_by_node": saturated,
        "why_evicted": [{"t_s": round((float(e["ts"]) - t0) * speed, 1), "node": e["node"], "workload": e["workload"],
                         "tier": e.get("tier"), "reason": e["reason"], "trigger": e.get("trigger_resource"),
                         "numbers": e.get("numbers")} for e in evictions],
        "timeline": {"time_s": [round((t - t0) * speed, 1) for t in times.tolist()],
                     "reclaimed_cpu_m_by_node": {name: reclaimed[:, i, 0].round(1).tolist()
                                                 for i, name in enumerate(node_names)}},
    }


def _durations(day: dict[str, Any]) -> dict[str, float]:
    """Batch pod name → its undisturbed wall duration, from the schedule (a pod is named after its
    arrival: the bare pod itself, or ``<job>-<suffix>``)."""
    from pathlib import Path

    path = Path(day["slice_dir"]) / "batch-schedule.json"
    try:
        arrivals = json.loads(path.read_text())["arrivals"]
    except (OSError, ValueError, KeyError):
        return {}
    names = sorted(((a["name"], float(a["duration_s"])) for a in arrivals), key=lambda x: -len(x[0]))
    out = {}
    for p in day["console"]["batch_pods"]:
        base = p["name"].split("/")[-1]
        for name, duration in names:
            if base == name or base.startswith(name + "-"):
                out[p["name"]] = duration
                break
    return out


def _waited(samples: list[dict], node_names: list[str], times: np.ndarray, step_wall: float):
    waited = {n: 0 for n in node_names}
    saturated = {n: 0 for n in node_names}
    if not samples:
        return waited, saturated
    ts = np.array([s["ts"] for s in samples])
    for t in times.tolist():
        a = int(np.searchsorted(ts, t))
        b = int(np.searchsorted(ts, t + step_wall)) - 1
        if a >= len(samples) or b <= a:
            continue
        span = (ts[b] - ts[a]) * 1e6
        host_a, host_b = samples[a].get("host_cpu"), samples[b].get("host_cpu")
        host_share = (host_b["total_us"] - host_a["total_us"]) / span if host_a and host_b and span > 0 else 0.0
        for name in node_names:
            na = (samples[a]["nodes"].get(name) or {}).get("cpu")
            nb = (samples[b]["nodes"].get(name) or {}).get("cpu")
            if na and nb and span > 0 and (nb["total_us"] - na["total_us"]) / span >= WAIT_SHARE:
                waited[name] += 1
                if host_share >= HOST_SATURATED:
                    saturated[name] += 1
    return waited, saturated


class ReplayObserver:
    """Per-step replay figures the accumulator does not keep: reclaimed cpu and contention per
    node, and every eviction's why."""

    def __init__(self, node_names: list[str]) -> None:
        self.node_names = node_names
        self.time_s: list[float] = []
        self.reclaimed: list[list[float]] = []
        self.contention_steps = {n: 0 for n in node_names}
        self.why: list[dict[str, Any]] = []
        #: per step, ``(n, 2)`` cpu mcpu and memory bytes: the ledgers :func:`ledger_divergence` reads
        self.prod_reservation: list[np.ndarray] = []
        self.batch_request: list[np.ndarray] = []
        self.usage: list[np.ndarray] = []     # production + batch usage

    def __call__(self, record) -> None:
        request = record.prod_request + record.batch_request
        x = np.maximum(0.0, request[:, 0] - record.capacity[:, 0])
        self.time_s.append(float(record.time_s))
        self.reclaimed.append(x.round(1).tolist())
        self.prod_reservation.append(np.array(record.prod_reservation[:, :2], dtype=float))
        self.batch_request.append(np.array(record.batch_request[:, :2], dtype=float))
        self.usage.append(np.array(record.prod_usage[:, :2] + record.batch_usage[:, :2], dtype=float))
        if record.contention_mcpu is not None:
            for i, name in enumerate(self.node_names):
                if record.contention_mcpu[i] > 1e-6:
                    self.contention_steps[name] += 1
        for e in record.events:
            if e.kind in ("evicted", "production_evicted"):
                self.why.append({"t_s": float(record.time_s), "kind": e.kind, "count": e.count, "reason": e.reason,
                                 "node": self.node_names[e.node] if 0 <= e.node < len(self.node_names) else None,
                                 "task": int(e.task), "detail": e.detail})


LEDGER_PART_SHARE = 0.05   # live and replay ledgers "part" when they differ by this share of the node


def ledger_divergence(ledgers: list[dict[str, Any]], observer: ReplayObserver, *, t0: float, speed: float,
                      capacity: np.ndarray) -> dict[str, Any] | None:
    """Where the console's ledgers and the replay's part, node by node.

    ``ledgers``: the day's reads of the console's node ledgers (``{"ts": Unix s, "nodes": {name:
    {"capacity", "prod_reservation", "batch_request", "usage": [cpu mcpu, memory bytes]}}}``,
    :func:`agents.lab.run.console_ledgers`); ``observer``: the replay's per-step ledgers on the
    simulated clock; ``t0``: the day's start (Unix s); ``speed``: k; ``capacity``: ``(n, 2)`` the
    replay's capacity in the observer's node order. Each live read is paired with the replay step
    holding its simulated time ``(ts − t0)·k``.

    The figure placement reads is the **free room** ``C − Σ r_prod − Σ q_batch`` (docs/design.md
    §6): two sides may book a pod differently (the console charges the agent's own DaemonSet pod
    as production where the replay's node is already smaller by it) and still offer batch the same
    room. Returns, per node and for ``cpu`` and ``memory``: the medians over the paired reads of
    the free room, the batch requests, the production reservation and the node's usage
    (production and batch) on each side; ``parted_t_s``, the first simulated second where the
    free rooms differ by more than :data:`LEDGER_PART_SHARE` of the replay's capacity (None:
    never) and ``parted_share_of_reads``; and under ``series`` the paired reads of each (free rooms
    and batch requests drawn by the report; ``live_usage`` None where a read had none). None when the day has no ledger reads (recorded before they
    were taken) or the replay no steps.

    Example: a 400 m node (both sides) whose live production reservation reads 120 m and batch
    200 m all day while the replay holds 150 m and 200 m → free room 80 vs 50 m, ``parted_t_s`` 0
    (30 m > 5 % of 400 m)."""
    if not ledgers or not observer.time_s:
        return None
    times = np.asarray(observer.time_s, dtype=float)
    step = float(times[1] - times[0]) if len(times) > 1 else 0.0
    out: dict[str, Any] = {}
    for i, name in enumerate(observer.node_names):
        pairs = []
        for read in ledgers:
            entry = (read.get("nodes") or {}).get(name)
            if not entry or any(entry.get(k) is None for k in ("capacity", "prod_reservation", "batch_request")):
                continue
            t_s = (float(read["ts"]) - t0) * speed
            if t_s < times[0] or t_s > times[-1] + step:
                continue
            k = min(int(np.searchsorted(times, t_s, side="right")) - 1, len(times) - 1)
            pairs.append((t_s, k, entry))
        if not pairs:
            continue
        node: dict[str, Any] = {"reads": len(pairs), "series": {"time_s": [round(t, 1) for t, _, _ in pairs]}}
        for d, dim in ((0, "cpu"), (1, "memory")):
            def live(key: str) -> np.ndarray:
                return np.array([float(e[key][d]) for _, _, e in pairs])

            live_prod, live_batch = live("prod_reservation"), live("batch_request")
            live_free = live("capacity") - live_prod - live_batch
            rep_prod = np.array([observer.prod_reservation[k][i, d] for _, k, _ in pairs])
            rep_batch = np.array([observer.batch_request[k][i, d] for _, k, _ in pairs])
            rep_free = float(capacity[i, d]) - rep_prod - rep_batch
            live_usage_read = np.array([np.nan if (e.get("usage") or [None, None])[d] is None else float(e["usage"][d])
                                        for _, _, e in pairs])
            live_usage = live_usage_read[~np.isnan(live_usage_read)]
            rep_usage = np.array([observer.usage[k][i, d] for _, k, _ in pairs])
            parted = np.abs(live_free - rep_free) > LEDGER_PART_SHARE * float(capacity[i, d])
            node["series"][dim] = {"live_free": live_free.round(1).tolist(), "replay_free": rep_free.round(1).tolist(),
                                   "live_batch_request": live_batch.round(1).tolist(),
                                   "replay_batch_request": rep_batch.round(1).tolist(),
                                   "live_prod_reservation": live_prod.round(1).tolist(),
                                   "replay_prod_reservation": rep_prod.round(1).tolist(),
                                   "live_usage": [None if np.isnan(u) else round(float(u), 1) for u in live_usage_read],
                                   "replay_usage": rep_usage.round(1).tolist()}
            node[dim] = {"live_free_median": float(np.median(live_free)),
                         "replay_free_median": float(np.median(rep_free)),
                         "live_batch_request_median": float(np.median(live_batch)),
                         "replay_batch_request_median": float(np.median(rep_batch)),
                         "live_prod_reservation_median": float(np.median(live_prod)),
                         "replay_prod_reservation_median": float(np.median(rep_prod)),
                         "live_usage_median": float(np.median(live_usage)) if len(live_usage) else None,
                         "replay_usage_median": float(np.median(rep_usage)),
                         "parted_t_s": round(pairs[int(np.argmax(parted))][0], 1) if parted.any() else None,
                         "parted_share_of_reads": round(float(parted.mean()), 3)}
        out[name] = node
    return out or None


def format_divergence(divergence: dict[str, Any] | None) -> str:
    """The lines ``kalena lab run`` prints for :func:`ledger_divergence`."""
    if not divergence:
        return "ledgers: no reads of the console's node ledgers in this day (recorded before they were taken)"
    lines = ["ledgers, live vs replay (medians over the day; free = C − Σ r_prod − Σ q_batch, what placement "
             f"reads; parted: first simulated time the free rooms differ by > {LEDGER_PART_SHARE:.0%} of the node):"]
    for name, node in divergence.items():
        parts = []
        for dim, unit, scale in (("cpu", "m", 1.0), ("memory", "MiB", 2.0 ** -20)):
            x = node[dim]

            def pair(key: str) -> str:
                a, b = x[f"live_{key}_median"], x[f"replay_{key}_median"]
                return f"{'?' if a is None else f'{a * scale:.0f}'} vs {b * scale:.0f}"

            parted = ("never" if x["parted_t_s"] is None else
                      f"at {x['parted_t_s'] / 3600:.2f} h ({x['parted_share_of_reads']:.0%} of reads)")
            parts.append(f"{dim} free {pair('free')} {unit}, batch {pair('batch_request')}, production reservation "
                         f"{pair('prod_reservation')}, usage {pair('usage')}, parted {parted}")
        lines.append(f"  {name}: " + "; ".join(parts))
    return "\n".join(lines)


def daemonset_memory_requests(pods: list[dict[str, Any]]) -> dict[str, float]:
    """``uid → Σ memory requests`` (bytes) of the DaemonSet pods in a ``kubectl get pods -A``
    list (the pods whose memory inside their requests the agent takes off its reading)."""
    from agents.orchestrators.kubernetes.batch_resources import QuantityError, memory_bytes

    out: dict[str, float] = {}
    for pod in pods:
        meta = pod.get("metadata") or {}
        if not any(o.get("kind") == "DaemonSet" for o in meta.get("ownerReferences") or []):
            continue
        total = 0.0
        for c in (pod.get("spec") or {}).get("containers") or []:
            raw = ((c.get("resources") or {}).get("requests") or {}).get("memory")
            try:
                total += float(memory_bytes(raw, field="requests.memory")) if raw else 0.0
            except QuantityError:
                pass
        out[meta.get("uid", "")] = total
    return out


def working_set_divergence(day: dict[str, Any], observer: ReplayObserver, *, unaccounted: np.ndarray | None,
                           capacity: np.ndarray, threshold_ratio: float) -> dict[str, Any] | None:
    """The memory working set each side's eviction rule reads, node by node: live, the agent's
    reading as the sampler saw it each second — the node's ``kubepods`` working set less each
    DaemonSet pod's within its memory request (docs/agent.md, "Configuration") — and the replay's
    at the same simulated second — production and batch usage plus the node's held unaccounted
    memory. ``capacity``: ``(n, 2)``, memory C per node (the same on both sides); pressure starts
    at ``threshold_ratio · C`` (the policy's ``evict_threshold_ratio``).

    Returns per node the medians and 90th percentiles of both, the median of live − replay, the
    share of paired seconds at or above the threshold on each side, and ``series`` (every 5th
    paired second: simulated time, live, replay, bytes) for the report; None when the day has no
    working-set samples (recorded before the sampler kept them). Example: a node of C = 378 MiB
    whose live reading sits at 352 MiB and the replay's at 361 MiB → live − replay −9 MiB, the
    replay above 0.95 · C = 359.1 MiB all day and live never."""
    times = np.asarray(observer.time_s, dtype=float)
    if not len(times):
        return None
    step = float(times[1] - times[0]) if len(times) > 1 else 0.0
    speed, t0 = float(day["slice_summary"]["config"]["speed"]), float(day["play_start_s"])
    ds = daemonset_memory_requests(day.get("pods") or [])
    held = np.zeros(len(observer.node_names)) if unaccounted is None else np.asarray(unaccounted, dtype=float)
    out: dict[str, Any] = {}
    for i, name in enumerate(observer.node_names):
        t_s, live, rep = [], [], []
        for row in day.get("samples") or []:
            entry = (row.get("nodes") or {}).get(name) or {}
            total = entry.get("kubepods_ws_bytes")
            if total is None:
                continue
            t = (float(row["ts"]) - t0) * speed
            if t < times[0] or t > times[-1] + step:
                continue
            k = min(int(np.searchsorted(times, t, side="right")) - 1, len(times) - 1)
            inside = sum(min(float(v), ds[uid]) for uid, v in (entry.get("pod_ws_bytes") or {}).items() if uid in ds)
            t_s.append(t)
            live.append(float(total) - inside)
            rep.append(float(observer.usage[k][i, 1]) + float(held[i]))
        if not live:
            continue
        lv, rv = np.array(live), np.array(rep)
        line = threshold_ratio * float(capacity[i, 1])
        out[name] = {"seconds": len(lv), "threshold_bytes": line,
                     "live_median": float(np.median(lv)), "replay_median": float(np.median(rv)),
                     "live_p90": float(np.percentile(lv, 90)), "replay_p90": float(np.percentile(rv, 90)),
                     "live_minus_replay_median": float(np.median(lv - rv)),
                     "live_share_at_threshold": float(np.mean(lv >= line)),
                     "replay_share_at_threshold": float(np.mean(rv >= line)),
                     "series": {"time_s": [round(t, 1) for t in t_s[::5]], "live": [round(v) for v in live[::5]],
                                "replay": [round(v) for v in rep[::5]]}}
    return out or None


def format_working_sets(divergence: dict[str, Any] | None) -> str:
    """The lines ``kalena lab run`` prints for :func:`working_set_divergence`."""
    if not divergence:
        return "working sets: not sampled in this day (recorded before the sampler kept them)"
    mib = 2.0 ** -20
    lines = ["working sets the eviction rule reads, live (the agent's reading) vs replay (medians; share of the day "
             "at or above the pressure threshold):"]
    for name, x in divergence.items():
        lines.append(f"  {name}: {x['live_median'] * mib:.1f} vs {x['replay_median'] * mib:.1f} MiB (p90 "
                     f"{x['live_p90'] * mib:.1f} vs {x['replay_p90'] * mib:.1f}; live − replay "
                     f"{x['live_minus_replay_median'] * mib:+.1f}); ≥ {x['threshold_bytes'] * mib:.1f} MiB "
                     f"{x['live_share_at_threshold']:.1%} vs {x['replay_share_at_threshold']:.1%} of the day")
    return "\n".join(lines)


def replay_figures(summary: dict[str, Any], observer: ReplayObserver) -> dict[str, Any]:
    """The replay's figures under the live figures' names."""
    return {
        "reclaimed_fraction_cpu": summary["reclaimed_fraction_cpu"], "reclaimed_fraction_ram": summary["reclaimed_fraction_ram"],
        "batch_pod_hours": summary["batch_pod_hours"], "batch_evicted": summary["batch_evicted"],
        "batch_evicted_by_reason": dict(summary.get("batch_evicted_by_reason") or {}),
        "batch_evictions_per_100_pod_hours": summary["batch_evictions_per_100_pod_hours"],
        "production_evictions": summary["production_evictions"], "production_oom_kills": summary["production_oom_kills"],
        "batch_placed": summary["batch_placed"], "batch_completed": summary["batch_completed"],
        "run_time_inflation_p50": summary.get("completion_inflation_p50"),
        "blueprint_findings": summary.get("blueprint_violations", 0),
        "production_waited_node_steps": summary["production_contention_node_steps"],
        "production_waited_node_steps_by_node": observer.contention_steps,
        "throttle_node_steps_by_node": observer.contention_steps,
        "why_evicted": observer.why,
        "timeline": {"time_s": observer.time_s,
                     "reclaimed_cpu_m_by_node": {n: [row[i] for row in observer.reclaimed]
                                                 for i, n in enumerate(observer.node_names)}},
    }


def compare(live: dict[str, Any], replay: dict[str, Any]) -> dict[str, Any]:
    """Rows ``{figure, live, replay, ratio, in_band, gate, explanation}`` and the gates' verdict."""
    rows = []
    for key in ("reclaimed_fraction_cpu", "reclaimed_fraction_ram", "batch_pod_hours", "batch_placed",
                "batch_completed", "run_time_inflation_p50", "batch_evicted",
                "batch_evictions_per_100_pod_hours", "production_evictions", "production_oom_kills",
                "blueprint_findings", "production_waited_node_steps"):
        lv, rv = live.get(key), replay.get(key)
        r = ratio(lv, rv)
        in_band = r is not None and BAND[0] <= r <= BAND[1]
        gate = None
        if key == "production_evictions":
            gate = lv == 0 and rv == 0
        elif key in GATED:
            gate = in_band
        rows.append({"figure": key, "live": lv, "replay": rv, "ratio": None if r is None else round(r, 3),
                     "in_band": in_band, "gate": gate,
                     "explanation": "" if in_band else explain(key, live, replay)})
    invariants = live.get("invariants")
    if invariants is not None:  # the lab's own record after the day (agents.lab.invariants): no replay figure
        for key in ("lost", "double_bound"):
            value = (invariants.get("counts") or {}).get(key)
            rows.append({"figure": f"batch_pods_{key}", "live": value, "replay": None, "ratio": None,
                         "in_band": True, "gate": value == 0,
                         "explanation": "; ".join(str(x) for x in (invariants.get(key) or [])[:5])})
    failed = [r["figure"] for r in rows if r["gate"] is False]
    per_node = []
    for node in sorted(set(live.get("psi_events_by_node") or {}) | set(replay.get("throttle_node_steps_by_node") or {})):
        per_node.append({
            "node": node, "psi_events": (live.get("psi_events_by_node") or {}).get(node),
            "throttle_actions": (live.get("throttle_actions_by_node") or {}).get(node),
            "waited_node_steps": (live.get("production_waited_node_steps_by_node") or {}).get(node),
            "host_saturated_node_steps": (live.get("host_saturated_node_steps_by_node") or {}).get(node),
            "kernel_oom_kills": (live.get("kernel_oom_kills_by_node") or {}).get(node, 0),
            "replay_contention_node_steps": (replay.get("throttle_node_steps_by_node") or {}).get(node)})
    return {"rows": rows, "per_node": per_node, "gates_failed": failed, "gates_passed": not failed,
            "band": list(BAND)}


def format_table(comparison: dict[str, Any]) -> str:
    """The printed table: one figure a line, live, replay, ratio, gate."""
    def fmt(v):
        if v is None:
            return "—"
        return f"{v:,.4g}" if isinstance(v, float) else f"{v:,}"
    lines = [f"{'figure':38} {'live':>12} {'replay':>12} {'live÷replay':>12}  gate",
             "-" * 86]
    for r in comparison["rows"]:
        gate = {True: "PASS", False: "FAIL", None: ""}[r["gate"]]
        band = "" if r["in_band"] or r["gate"] is not None else "  out of band"
        lines.append(f"{r['figure']:38} {fmt(r['live']):>12} {fmt(r['replay']):>12} {fmt(r['ratio']):>12}  {gate}{band}")
        if r["explanation"] and not r["in_band"]:
            lines.append(f"    why: {r['explanation']}")
    if comparison.get("per_node"):
        lines.append("")
        lines.append(f"{'node':14} {'PSI events':>10} {'throttles':>10} {'waited steps':>13} {'of which host':>14} "
                     f"{'kernel OOM':>10} {'replay contention steps':>24}")
        for r in comparison["per_node"]:
            lines.append(f"{r['node']:14} {fmt(r['psi_events']):>10} {fmt(r['throttle_actions']):>10} "
                         f"{fmt(r['waited_node_steps']):>13} {fmt(r['host_saturated_node_steps']):>14} "
                         f"{fmt(r['kernel_oom_kills']):>10} {fmt(r['replay_contention_node_steps']):>24}")
        lines.append("  waited: node cpu PSI some ≥ 1 % of the step; of which host: the host's cpu PSI some ≥ 50 % "
                     "then (host saturation, not the node)")
        lines.append("")
    verdict = ("gates: all passed" if comparison["gates_passed"]
               else f"gates FAILED: {', '.join(comparison['gates_failed'])} (exit status 1)")
    lines.append(verdict)
    return "\n".join(lines)


def html_report(report: dict[str, Any]) -> str:
    """A self-contained HTML page: the table, the compression, and per node a timeline of
    reclaimed cpu (live and replay) with the faults and evictions marked."""
    import plotly.graph_objects as go
    import plotly.io as pio

    parts = [f"<h1>Lab day vs replay — {html.escape(report['lab'])}</h1>",
             # the explanations are long lines: wrapped, the page needs no sideways scrolling
             f"<pre style=\"white-space: pre-wrap\">{html.escape(format_table(report['comparison']))}</pre>"]
    live_t = report["live"]["timeline"]
    rep_t = report["replay"]["timeline"]
    for i, node in enumerate(live_t["reclaimed_cpu_m_by_node"]):
        fig = go.Figure()
        fig.add_scatter(x=[t / 3600 for t in live_t["time_s"]], y=live_t["reclaimed_cpu_m_by_node"][node],
                        name="live reclaimed cpu (m)", mode="lines")
        if node in rep_t["reclaimed_cpu_m_by_node"]:
            fig.add_scatter(x=[t / 3600 for t in rep_t["time_s"]], y=rep_t["reclaimed_cpu_m_by_node"][node],
                            name="replay reclaimed cpu (m)", mode="lines")
        for e in report["live"]["why_evicted"]:
            if e["node"] == node:
                fig.add_vline(x=e["t_s"] / 3600, line_dash="dot", line_color="red")
        _mark_faults(fig, report, node)
        fig.update_layout(title=f"{node}: reclaimed cpu in use (red dotted: evictions; orange: faults)",
                          xaxis_title="simulated time (h)", yaxis_title="m", template="plotly_white", height=360)
        parts.append(pio.to_html(fig, include_plotlyjs=(i == 0), full_html=False))
    for node, entry in (report.get("ledgers") or {}).items():
        hours = [t / 3600 for t in entry["series"]["time_s"]]
        for dim, scale, unit in (("cpu", 1.0, "m"), ("memory", 2.0 ** -20, "MiB")):
            fig = go.Figure()
            series = entry["series"][dim]
            for key, label, dash in (("live_free", "live free room", "solid"), ("replay_free", "replay free room", "dash"),
                                     ("live_batch_request", "live batch requests", "solid"),
                                     ("replay_batch_request", "replay batch requests", "dash")):
                fig.add_scatter(x=hours, y=[v * scale for v in series[key]], name=label, mode="lines",
                                line={"dash": dash})
            _mark_faults(fig, report, node)
            fig.update_layout(title=f"{node}: {dim} the console's ledger left free and booked for batch, against the "
                                    f"replay's (free = C − Σ r_prod − Σ q_batch)",
                              xaxis_title="simulated time (h)", yaxis_title=unit, template="plotly_white", height=320)
            parts.append(pio.to_html(fig, include_plotlyjs=False, full_html=False))
    parts.append(f"<pre style=\"white-space: pre-wrap\">{html.escape(format_divergence(report.get('ledgers')))}</pre>")
    for node, entry in (report.get("working_sets") or {}).items():
        fig = go.Figure()
        hours = [t / 3600 for t in entry["series"]["time_s"]]
        for key, label, dash in (("live", "live: the agent's reading", "solid"), ("replay", "replay", "dash")):
            fig.add_scatter(x=hours, y=[v / 2**20 for v in entry["series"][key]], name=label, mode="lines",
                            line={"dash": dash})
        fig.add_hline(y=entry["threshold_bytes"] / 2**20, line_dash="dot", line_color="red",
                      annotation_text="pressure starts", annotation_position="bottom right")
        for e in report["live"]["why_evicted"]:
            if e["node"] == node:
                fig.add_vline(x=e["t_s"] / 3600, line_dash="dot", line_color="red")
        for e in report["replay"].get("why_evicted") or []:
            if e.get("node") == node:
                fig.add_vline(x=e["t_s"] / 3600, line_dash="dash", line_color="purple")
        _mark_faults(fig, report, node)
        fig.update_layout(title=f"{node}: memory working set the eviction rule reads, live and replayed "
                                f"(red dotted: the threshold and live evictions; purple dashed: the replay's; "
                                f"orange: faults)",
                          xaxis_title="simulated time (h)", yaxis_title="MiB", template="plotly_white", height=320)
        parts.append(pio.to_html(fig, include_plotlyjs=False, full_html=False))
    parts.append(f"<pre style=\"white-space: pre-wrap\">{html.escape(format_working_sets(report.get('working_sets')))}"
                 "</pre>")
    compression = report.get("compression") or {}
    head = ("constant", "trace (s)", "÷ k (s)", "wall applied (s)", "floor (s)", "simulated (s)", "note")
    cells = [(c.get("name"), c.get("trace_s"), c.get("divided_s"), c.get("wall_s"),
              f"{c.get('floor_s')}{' *' if c.get('floored') else ''}", c.get("simulated_s"), c.get("note"))
             for c in compression.get("clocks") or []]
    parts.append(f"<h2>Time compression (k = {html.escape(str(compression.get('speed', '')))}; * the floor bound)</h2>"
                 + _table(head, cells))
    why = report["live"].get("why_evicted") or []
    parts.append("<h2>Why evicted (live)</h2>" + (_table(
        ("simulated t (s)", "node", "workload", "tier", "reason", "trigger"),
        [(e.get("t_s"), e.get("node"), e.get("workload"), e.get("tier"), e.get("reason"), e.get("trigger")) for e in why])
        if why else "<p>No eviction in the live day.</p>"))
    rep_why = report["replay"].get("why_evicted") or []
    parts.append("<h2>Why evicted (replay)</h2>" + (_table(
        ("simulated t (s)", "node", "pods", "kind", "reason", "working set (MiB)", "ledger before → after (MiB)"),
        [(e.get("t_s"), e.get("node"), e.get("count"), e.get("kind"), e.get("reason"),
          _mib((e.get("detail") or {}).get("working_set")),
          f"{_mib((e.get('detail') or {}).get('ledger_before'))} → {_mib((e.get('detail') or {}).get('ledger_after'))}")
         for e in rep_why]) if rep_why else "<p>No eviction in the replay.</p>"))
    livemetrics = report.get("livemetrics")
    if livemetrics:
        parts.append("<h2>The proposal's metrics 4, 5 and 7 from the nodes' cgroups</h2><pre style=\"white-space: "
                     f"pre-wrap\">{html.escape(format_livemetrics(livemetrics, report['replay']))}</pre>")
    return "<!doctype html><html><head><meta charset='utf-8'><title>kalena lab run</title></head><body>" + \
        "\n".join(parts) + "</body></html>"


def _mark_faults(fig, report: dict[str, Any], node: str) -> None:
    """Each fault of the day (``report["faults"]``) that touched ``node`` (or the whole lab) as an
    orange band on ``fig``'s simulated-hours axis, labelled with its kind."""
    for f in report.get("faults") or []:
        if f.get("started_at") is None:
            continue
        x0 = (float(f["started_at"]) - report["play_start_s"]) * report["speed"] / 3600
        x1 = (float(f.get("ended_at") or f["started_at"]) - report["play_start_s"]) * report["speed"] / 3600
        if not f.get("node") or f.get("node") == node:
            fig.add_vrect(x0=x0, x1=max(x1, x0 + 0.002), fillcolor="orange", opacity=0.25, line_width=0,
                          annotation_text=str(f.get("kind")), annotation_position="top left")


def _mib(value: Any) -> str:
    return "" if not isinstance(value, int | float) else f"{value / 2**20:.1f}"


def format_livemetrics(livemetrics: dict[str, Any] | None, replay: dict[str, Any]) -> str:
    """The lines ``kalena lab run`` prints for the day's metrics 4, 5 and 7
    (:mod:`agents.lab.livemetrics`), the replay's figure beside where it has one (its completion
    inflation; it has no scheduler waits and no PSI)."""
    if not livemetrics:
        return "metrics 4, 5, 7: not collected on this day"

    def q(d: dict[str, Any] | None, key: str, fmt: str = "{:.3g}") -> str:
        v = (d or {}).get(key)
        return "—" if v is None else fmt.format(v)

    lines = ["the proposal's metrics from the nodes' cgroups:"]
    m4 = livemetrics.get("metric4") or {}
    parts = []
    for bucket, b in (m4.get("buckets") or {}).items():
        tiers = b.get("tiers") or {}
        parts.append(f"{bucket} util: production {q(tiers.get('production'), 'share_waiting_over_5ms', '{:.0%}')}, "
                     f"batch {q(tiers.get('batch'), 'share_waiting_over_5ms', '{:.0%}')}")
    lines.append(f"  metric 4, share of runnable time waiting > 5 ms by node cpu utilisation "
                 f"({m4.get('source', '?').split(' (')[0]}): " + ("; ".join(parts) or "no samples")
                 + " (the replay has no scheduler waits)")
    m5 = livemetrics.get("metric5") or {}
    lat = (m5.get("latency_ms") or {}).get("all")
    lines.append(f"  metric 5, pressure signal → throttle, cpu weight or eviction: {q(lat, 'count', '{:.0f}')} actions, "
                 f"p50 {q(lat, 'p50')} ms, p99 {q(lat, 'p99')} ms (the replay has no PSI)")
    m7 = livemetrics.get("metric7") or {}
    infl, thr = m7.get("completion_inflation") or {}, m7.get("throttled_s_per_pod") or {}
    lines.append(f"  metric 7, batch completion-time inflation p50 {q(infl, 'p50')} (replay "
                 f"{q(replay, 'run_time_inflation_p50')}), p99 {q(infl, 'p99')}; throttled time per pod p50 "
                 f"{q(thr, 'p50')} s, p99 {q(thr, 'p99')} s")
    return "\n".join(lines)


def _table(head: tuple[str, ...], rows: list[tuple]) -> str:
    """An HTML table of ``rows`` under ``head`` (every cell escaped)."""
    th = "".join(f"<th style='text-align:left;padding:2px 8px'>{html.escape(h)}</th>" for h in head)
    body = "".join("<tr>" + "".join(f"<td style='padding:2px 8px'>{html.escape('' if v is None else str(v))}</td>"
                                    for v in row) + "</tr>" for row in rows)
    return f"<table style='border-collapse:collapse;font-family:monospace'><tr>{th}</tr>{body}</table>"


def finite(x: Any) -> Any:
    """JSON-safe copy (NaN/inf → None, numpy → Python)."""
    if isinstance(x, dict):
        return {str(k): finite(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [finite(v) for v in x]
    if isinstance(x, (np.floating, float)):
        return None if not math.isfinite(float(x)) else float(x)
    if isinstance(x, np.integer):
        return int(x)
    return x
