"""``kalena-agent bench interference``: what a latency-sensitive service pays for co-located batch,
on real cgroups (the proposal's §6.3 metrics 3 and 4).

Setup (cgroup v1 cpu/cpuacct/memory/cpuset, PSI from the v2 hierarchy beside them):

* **node cpus** (``--node-cpus``, default the last cpu): a cpuset holding the service group and
  the batch group — the "node" whose capacity the agent manages (C = 1000 mcpu per node cpu);
* **client cpus** (``--client-cpus``, default the others): the load generator, the sampler and
  the agent (the benchmark process, cpu affinity), so they never compete with the service;
* ``<bench>/service``: an HTTP/1.1 server (one thread per keep-alive connection) answering
  ``GET /`` with ``--work-iterations`` of pure-python cpu work (≈ 1.5–2 ms here); a service
  workload sized at its peak plus margin (request ``--service-request-mcpu``, 500 m; limit = the
  node cpus; ``cpu.shares`` from its request as the kubelet sets them, 512);
* ``<bench>/batch``: ``--burners`` (default 2 per node cpu) busy loops; a batch workload placed
  into reclaimed capacity (request = C, no limit, slack-cpu allowed, ``cpu.shares`` 1,024 as the
  kubelet sets them from its request);
* the load: h2load (Debian's ``nghttp2-client``) over HTTP/1.1, ``--clients`` connections each
  paced at ``--rate / --clients`` requests per second for the whole arm; at ``--steady-s`` a second
  h2load with the same rate runs for ``--spike-s`` (the offered load doubles), then the arm runs
  ``--recover-s`` more.

Arms, on the same offered load, interleaved ``isolated, colocated_unmanaged, colocated_kalena``
× ``--repetitions`` so a change in the machine's load hits every arm alike:

* ``isolated``: no batch;
* ``colocated_unmanaged``: the burners, no agent (CFS shares only);
* ``colocated_kalena``: the burners and the real agent — :class:`~agents.loop.MitigationLoop` with
  its cgroup collector, enforcer, PSI trigger on the service group's ``cpu.pressure`` and the
  polling fallback, anti-starvation on, docs/design.md defaults except ``grace_s = 0`` (an arm is shorter
  than the 300 s start-up grace) — started with the burners, ``--settle-s`` before the load.

Each arm starts its burners (and agent) ``--settle-s`` before the load, so all arms are measured
over the same window. Measured per arm: latency of every request (h2load's log: from writing the
request to the end of the response), p50/p99/p99.9 outside the spike and during it, throughput,
batch cpu-seconds (the batch group's ``cpuacct.usage`` over the load window), scheduling delay of
the service's threads (:mod:`agents.bench.interference_probe`), node cpu utilisation per second
and how much of it was the machine's other load, the load average before and after.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np

from agents.bench import interference_stats as st
from agents.bench.harness import BURNER, CgroupHarness
from agents.bench.interference_probe import HTTP_SERVICE, Sampler, parse_h2load_requests, read_h2load_log
from agents.cgroups.backend import detect
from agents.collectors.cgroup import CgroupCollector, NodeCollector
from agents.collectors.telemetry import CgroupTelemetry
from agents.discovery.files import FileSource
from agents.enforcer import Enforcer
from agents.errors import FacilityUnavailable
from agents.loop import MitigationLoop
from agents.pressure.arming import SignalArming
from agents.pressure.monitor import PressureMonitor
from agents.runner import drive
from agents.settings import LoopSettings
from kalena_engine.policy import Policy
from kalena_engine.resources import CPU

ARMS = ("isolated", "colocated_unmanaged", "colocated_kalena")
RESTORE_RATIO = 1.10
WINDOW_S = 1.0


def cpu_list(text: str, *, flag: str) -> list[int]:
    """``"0-1,3"`` → ``[0, 1, 3]``; raises ``ValueError`` naming ``flag`` for anything else or an
    offline cpu."""
    out: list[int] = []
    try:
        for part in text.split(","):
            lo, _, hi = part.strip().partition("-")
            out.extend(range(int(lo), int(hi or lo) + 1))
    except ValueError:
        raise ValueError(f"{flag}: {text!r} is not a cpu list such as 1 or 0-1,3") from None
    online = os.sched_getaffinity(0) | set(range(os.cpu_count() or 1))
    bad = [c for c in out if c not in online or c < 0]
    if not out or bad:
        raise ValueError(f"{flag}: cpu {bad or text} is not online (online: {sorted(online)})")
    return sorted(set(out))


class _Arm:
    """Everything one arm run needs from the benchmark (kept together to keep ``run`` short)."""

    def __init__(self, harness: CgroupHarness, opts: dict[str, Any], sampler: Sampler, tmp: Path) -> None:
        self.h, self.o, self.sampler, self.tmp = harness, opts, sampler, tmp

    def _reset_groups(self) -> None:
        for name, shares in (("service", _kubelet_shares(self.o["service_request_mcpu"])), ("batch", 1024)):
            self.h.write("cpu", name, "cpu.cfs_quota_us", "-1")
            self.h.write("cpu", name, "cpu.shares", str(shares))

    def _start_agent(self) -> tuple[MitigationLoop, PressureMonitor, threading.Event, threading.Thread]:
        o, h = self.o, self.h
        capacity_mcpu = 1000.0 * len(o["node_cpus"])
        workloads = self.tmp / "workloads.json"
        workloads.write_text(json.dumps({"workloads": [
            {"id": "bench/service", "cgroup": h.rel("service"), "labels": {"kalena.naughtian.io/tier": "service"},
             "requests": {"cpu": f"{int(o['service_request_mcpu'])}m"}, "limits": {"cpu": f"{int(capacity_mcpu)}m"}},
            {"id": "bench/batch", "cgroup": h.rel("batch"), "labels": {"kalena.naughtian.io/tier": "batch"},
             "requests": {"cpu": f"{int(capacity_mcpu)}m"}},
        ]}))
        fs = detect(o["cgroup_root"])
        capacity = np.full(8, math.inf)
        capacity[CPU] = capacity_mcpu
        settings = LoopSettings(node_name="bench-interference", capacity=capacity,
                                policy=Policy().with_estimator(grace_s=0.0), sampling_interval_s=10.0,
                                mitigation_interval_s=o["tick_s"], pressure_source="psi-trigger",
                                psi_window_s=o["psi_window_s"], psi_cpu_threshold_ms=o["threshold_ms"],
                                enforce_memory_caps=False)
        enforcer = Enforcer(fs)
        monitor = PressureMonitor()
        arming = SignalArming(settings, monitor, enforcer, fs, node_cgroup=h.rel(""))
        loop = MitigationLoop(settings, sources=[FileSource(workloads)],
                              telemetry=CgroupTelemetry(CgroupCollector(fs)), fs=fs, enforcer=enforcer,
                              node_reader=NodeCollector(fs, node_cgroup=h.rel("")).read, arming=arming)
        stop = threading.Event()
        thread = threading.Thread(target=drive, args=(loop, monitor, o["tick_s"], stop.is_set), daemon=True,
                                  name="agent")
        thread.start()
        return loop, monitor, stop, thread

    def _h2load(self, rate: float, duration_s: float, log_path: Path) -> subprocess.Popen:
        o = self.o
        per_client = rate / o["clients"]
        argv = [o["h2load"], "--h1", "-t1", f"-c{o['clients']}", f"--rps={per_client:g}", f"-D{duration_s:g}",
                f"--log-file={log_path}", f"http://127.0.0.1:{o['port']}/"]
        client_cpus = set(o["client_cpus"])
        return subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                preexec_fn=lambda: os.sched_setaffinity(0, client_cpus))

    def run(self, arm: str, rep: int, log: Any) -> tuple[dict[str, Any], dict[str, Any]]:
        o, h = self.o, self.h
        self._reset_groups()
        load_before = os.getloadavg()
        burners = [h.spawn("batch", BURNER) for _ in range(o["burners"])] if arm != "isolated" else []
        agent = self._start_agent() if arm == "colocated_kalena" else None
        try:
            time.sleep(o["settle_s"])
            base_log, spike_log = self.tmp / f"{arm}-{rep}-base.log", self.tmp / f"{arm}-{rep}-spike.log"
            total_s = o["steady_s"] + o["spike_s"] + o["recover_s"]
            batch0, service0 = h.cpu_usage_ns("batch"), h.cpu_usage_ns("service")
            self.sampler.begin()
            t_wall0 = time.time()
            base = self._h2load(o["rate"], total_s, base_log)
            time.sleep(o["steady_s"])
            spike = self._h2load(o["rate"], o["spike_s"], spike_log) if o["spike_s"] > 0 else None
            spike_out = spike.communicate(timeout=o["spike_s"] + 120)[0] if spike else ""
            base_out = base.communicate(timeout=total_s + 120)[0]
            samples = self.sampler.end()
            batch_ns, service_ns = h.cpu_usage_ns("batch") - batch0, h.cpu_usage_ns("service") - service0
            actions = list(agent[0].actions) if agent else []
            batch_cpu_at_end = {"cfs_quota_us": int(h.read("cpu", "batch", "cpu.cfs_quota_us")),
                                "shares": int(h.read("cpu", "batch", "cpu.shares"))}
        finally:
            if agent is not None:
                loop, monitor, stop, thread = agent
                stop.set()
                monitor.wake()
                thread.join(10)
                monitor.close()
            for proc in burners:
                proc.kill()
                proc.wait(10)
        load_after = os.getloadavg()
        for proc, out, name in ((base, base_out, "base"), (spike, spike_out, "spike")):
            if proc is not None and proc.returncode != 0:
                raise RuntimeError(f"h2load ({name} load, {arm}) exited {proc.returncode}: {out[-500:]}")
        return self._measure(arm, rep, base_log, spike_log, base_out, spike_out, t_wall0, samples, batch_ns,
                             service_ns, actions, load_before, load_after, log, batch_cpu_at_end)

    def _measure(self, arm, rep, base_log, spike_log, base_out, spike_out, t_wall0, samples, batch_ns, service_ns,
                 actions, load_before, load_after, log, batch_cpu_at_end) -> tuple[dict[str, Any], dict[str, Any]]:
        o = self.o
        b_start, b_status, b_lat = read_h2load_log(base_log)
        s_start, s_status, s_lat = read_h2load_log(spike_log) if o["spike_s"] > 0 else (np.array([]),) * 3
        start = np.concatenate([b_start, s_start])
        status = np.concatenate([b_status, s_status]).astype(int)
        lat = np.concatenate([b_lat, s_lat])
        t0 = float(b_start.min()) if b_start.size else t_wall0
        spike_t = float(s_start.min()) if s_start.size else t0 + o["steady_s"]
        spike_end = spike_t + o["spike_s"]
        ok = (status >= 200) & (status < 300)
        in_spike = (start >= spike_t) & (start < spike_end)
        total_s = o["steady_s"] + o["spike_s"] + o["recover_s"]
        outside_s = total_s - o["spike_s"]
        windows = st.windowed_p99(start[ok], lat[ok], t0_s=t0, t1_s=t0 + total_s, window_s=WINDOW_S)
        tally = st.WaitTally.empty()
        for mid, cpu_ns, wait_ns, slices in samples.sched:
            tally.add(cpu_ns=cpu_ns, wait_ns=wait_ns, slices=slices, util_pct=samples.util_at(mid))
        util = np.array([w[2] for w in samples.util]) if samples.util else np.array([])
        other = np.array([w[3] for w in samples.util]) if samples.util else np.array([])
        counted = {"base": parse_h2load_requests(base_out), "spike": parse_h2load_requests(spike_out)}
        n_ok = int(ok.sum())
        record = {
            "arm": arm, "repetition": rep, "started_unix_s": round(t_wall0, 3),
            "loadavg_before": [round(x, 2) for x in load_before], "loadavg_after": [round(x, 2) for x in load_after],
            "node_util_mean_pct": float(util.mean()) if util.size else None,
            "other_load_on_node_cpus_mean_pct": float(other.mean()) if other.size else None,
            "offered_requests": int(round(o["rate"] * total_s + o["rate"] * o["spike_s"])),
            "responses": int(status.size), "responses_2xx": n_ok,
            "h2load_requests": counted,
            "throughput_rps": float((ok & ~in_spike).sum() / outside_s) if outside_s > 0 else None,
            "spike_throughput_rps": float((ok & in_spike).sum() / o["spike_s"]) if o["spike_s"] > 0 else None,
            "steady": st.latency_summary(lat[ok & ~in_spike]),
            "spike": st.latency_summary(lat[ok & in_spike]),
            "spike_start_s": round(spike_t - t0, 3),
            "batch_cpu_seconds": batch_ns / 1e9,
            "service_cpu_seconds": service_ns / 1e9,
            "service_cpu_ms_per_request": service_ns / 1e6 / n_ok if n_ok else None,
            "wait": tally.shares(),
            "sched_interval_ms": {"p50": st.percentile(np.array(samples.gaps) * 1e3, 50),
                                  "p99": st.percentile(np.array(samples.gaps) * 1e3, 99)},
            "batch_cpu_at_end": batch_cpu_at_end,
            "agent_actions": {a: sum(1 for m in actions if m["action"] == a) for a in sorted({m["action"] for m in actions})},
            "first_agent_action_after_spike_s": next(
                (round(m["ts"] - spike_t, 3) for m in actions if m["ts"] >= spike_t and m["action"] in ("throttle", "cpu_weight")),
                None),
            "p99_windows": [[w[0], w[1], w[2]] for w in windows],
        }
        series = {"latency_ms": lat[ok], "in_spike": in_spike[ok], "start_s": start[ok] - t0, "windows": windows, "spike_start_s": spike_t - t0, "spike_s": o["spike_s"],
                  "tally": tally}
        log(f"rep {rep} {arm:20s}: {n_ok}/{record['offered_requests']} ok, steady p99 {_fmt(record['steady']['p99_ms'])} ms, "
            f"spike p99 {_fmt(record['spike']['p99_ms'])} ms, batch {record['batch_cpu_seconds']:.1f} cpu-s, "
            f"wait>5ms {_fmt(record['wait']['wait_over_5ms_share'], 4)}, node util {_fmt(record['node_util_mean_pct'], 0)} % "
            f"(others {_fmt(record['other_load_on_node_cpus_mean_pct'], 0)} %), load {record['loadavg_before'][0]}")
        return record, series


def _kubelet_shares(request_mcpu: float) -> int:
    """``cpu.shares`` as the kubelet sets them from a cpu request: mcpu × 1024 / 1000 (≥ 2)."""
    return max(2, int(request_mcpu * 1024 / 1000))


def _fmt(value: float | None, digits: int = 2) -> str:
    return "—" if value is None else f"{value:.{digits}f}"


def run_benchmark(opts: dict[str, Any], log: Any = print) -> tuple[dict[str, Any], dict[str, list[dict[str, Any]]]]:
    """Run every arm ``opts["repetitions"]`` times, interleaved; return ``(summary, series)``.

    Raises:
        FacilityUnavailable: h2load, or the cgroup v1 hierarchies (with cpuset), are missing.
    """
    # its own prefix: bench mitigation's test checks that no kalena-bench-* group is left behind
    harness = CgroupHarness(opts["cgroup_root"], prefix="kalena-interference", cpusets=True)
    tmp = Path(tempfile.mkdtemp(prefix="kalena-interference-"))
    node = ",".join(map(str, opts["node_cpus"]))
    try:
        # the bench's top group at 8× the default weight (as bench mitigation does): on a shared machine
        # the node cpus' other load then takes a bounded share, the same in every arm (recorded per arm)
        harness.write("cpu", "", "cpu.shares", str(opts["node_weight"]))
        harness.create("service", cpu_shares=_kubelet_shares(opts["service_request_mcpu"]), cpus=node)
        harness.create("batch", cpu_shares=1024, cpus=node)
        harness.create("agent-self", cpu_shares=10240)
        harness.move_self("agent-self")
        os.sched_setaffinity(0, set(opts["client_cpus"]))  # threads started from here inherit it
        service = harness.spawn_argv("service", [sys.executable, "-c", HTTP_SERVICE, str(opts["port"]),
                                                 str(opts["work_iterations"])], stdout=subprocess.PIPE)
        if service.stdout.readline().strip() != b"ready":
            raise RuntimeError(f"the service did not start on 127.0.0.1:{opts['port']} (port in use?)")
        sampler = Sampler(service.pid, opts["node_cpus"],
                          lambda: harness.cpu_usage_ns("service") + harness.cpu_usage_ns("batch"),
                          interval_s=opts["sched_interval_s"])
        sampler.start()
        arm_runner = _Arm(harness, opts, sampler, tmp)
        records: list[dict[str, Any]] = []
        series: dict[str, list[dict[str, Any]]] = {a: [] for a in ARMS}
        try:
            for rep in range(opts["repetitions"]):
                for arm in ARMS:
                    record, s = arm_runner.run(arm, rep, log)
                    records.append(record)
                    series[arm].append(s)
        finally:
            sampler.stop.set()
            sampler.join(5)
        summary = summarise(records, series, opts, sampler_errors=sampler.errors)
        summary["machine"]["cgroup_parent"] = harness.parent
        return summary, series
    finally:
        harness.cleanup()
        shutil.rmtree(tmp, ignore_errors=True)


def summarise(records: list[dict[str, Any]], series: dict[str, list[dict[str, Any]]], opts: dict[str, Any],
              sampler_errors: list[str] | None = None) -> dict[str, Any]:
    """Per-arm figures pooled over repetitions (with min–max per repetition), ratios, the goal."""
    arms: dict[str, Any] = {}
    by_rep_isolated_spike = {r["repetition"]: r["spike"]["p99_ms"] for r in records if r["arm"] == "isolated"}
    for arm in ARMS:
        recs = [r for r in records if r["arm"] == arm]
        for r, s in zip(recs, series[arm]):
            bound = by_rep_isolated_spike.get(r["repetition"])
            r["spike"]["restored_after_s"] = None if arm == "isolated" or bound is None or opts["spike_s"] <= 0 else \
                st.restored_after_s(s["windows"], spike_start_s=s["spike_start_s"],
                                    spike_end_s=s["spike_start_s"] + opts["spike_s"], bound_ms=RESTORE_RATIO * bound)
        steady = np.concatenate([s["latency_ms"] for s in series[arm]]) if series[arm] else np.array([])
        tally = st.WaitTally.empty()
        for s in series[arm]:
            tally.merge(s["tally"])
        shares = tally.shares()
        pooled_steady = st.latency_summary(np.concatenate(
            [_outside_spike(s) for s in series[arm]]) if series[arm] else [])
        pooled_spike = st.latency_summary(np.concatenate(
            [_inside_spike(s) for s in series[arm]]) if series[arm] else [])
        arms[arm] = {
            "p50_ms": pooled_steady["p50_ms"], "p99_ms": pooled_steady["p99_ms"], "p999_ms": pooled_steady["p999_ms"],
            "requests": pooled_steady["count"], "all_requests": int(steady.size),
            "throughput_rps": _mean([r["throughput_rps"] for r in recs]),
            "offered_rps": opts["rate"],
            "served_ratio": _mean([r["responses_2xx"] / r["offered_requests"] for r in recs if r["offered_requests"]]),
            "batch_cpu_seconds": _mean([r["batch_cpu_seconds"] for r in recs]),
            "wait_over_5ms_share": shares["wait_over_5ms_share"],
            "wait_over_10ms_share": shares["wait_over_10ms_share"],
            "wait_share": shares["wait_share"],
            "wait_by_utilisation": shares["by_utilisation"],
            "spike_p99_ms": pooled_spike["p99_ms"],
            "spike_restored_after_s": [r["spike"]["restored_after_s"] for r in recs],
            "node_util_mean_pct": _mean([r["node_util_mean_pct"] for r in recs]),
            "other_load_on_node_cpus_mean_pct": _mean([r["other_load_on_node_cpus_mean_pct"] for r in recs]),
            "loadavg_1m_before": [r["loadavg_before"][0] for r in recs],
            "span": {k: st.span([_get(r, k) for r in recs]) for k in
                     ("steady.p50_ms", "steady.p99_ms", "steady.p999_ms", "throughput_rps", "batch_cpu_seconds",
                      "spike.p99_ms", "wait.wait_over_5ms_share")},
            "repetitions": len(recs),
        }
    iso, unm, kal = (arms[a] for a in ARMS)
    ratio_k = st.ratio(kal["p99_ms"], iso["p99_ms"])
    batch_ratio = st.ratio(kal["batch_cpu_seconds"], unm["batch_cpu_seconds"])
    return {
        "arms": arms,
        "p99_ratio_kalena_vs_isolated": ratio_k,
        "p99_ratio_unmanaged_vs_isolated": st.ratio(unm["p99_ms"], iso["p99_ms"]),
        "p999_ratio_kalena_vs_isolated": st.ratio(kal["p999_ms"], iso["p999_ms"]),
        "p999_ratio_unmanaged_vs_isolated": st.ratio(unm["p999_ms"], iso["p999_ms"]),
        "spike_p99_ratio_kalena_vs_isolated": st.ratio(kal["spike_p99_ms"], iso["spike_p99_ms"]),
        "spike_p99_ratio_unmanaged_vs_isolated": st.ratio(unm["spike_p99_ms"], iso["spike_p99_ms"]),
        "batch_work_ratio_kalena_vs_unmanaged": batch_ratio,
        "goal": {"kalena_p99_within_10pct_of_isolated": ratio_k is not None and ratio_k <= 1.10,
                 "kalena_batch_at_least_half_of_unmanaged": batch_ratio is not None and batch_ratio >= 0.5},
        "machine": machine_facts(opts),
        "method": method_facts(opts),
        "per_arm_run": records,
        "sampler_errors": (sampler_errors or [])[:20],
    }


def _outside_spike(s: dict[str, Any]) -> np.ndarray:
    return s["latency_ms"][~s["in_spike"]] if "in_spike" in s else s["latency_ms"]


def _inside_spike(s: dict[str, Any]) -> np.ndarray:
    return s["latency_ms"][s["in_spike"]] if "in_spike" in s else np.array([])


def _get(record: dict[str, Any], dotted: str) -> float | None:
    value: Any = record
    for key in dotted.split("."):
        value = value.get(key) if isinstance(value, dict) else None
    return value


def _mean(values: list[float | None]) -> float | None:
    vals = [v for v in values if v is not None]
    return float(np.mean(vals)) if vals else None


def machine_facts(opts: dict[str, Any]) -> dict[str, Any]:
    model = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                  if line.startswith("model name")), platform.processor())
    version = subprocess.run([opts["h2load"], "--version"], capture_output=True, text=True).stdout.strip()
    return {"kernel": platform.release(), "cpu_model": model, "cpus_online": os.cpu_count(),
            "node_cpus": opts["node_cpus"], "client_cpus": opts["client_cpus"],
            "cgroup": "v1 cpu/cpuacct/memory/cpuset + v2 (unified) for per-group PSI",
            "psi_trigger_window_s": opts["psi_window_s"], "psi_trigger_threshold_ms": opts["threshold_ms"],
            "load_generator": version or "h2load", "python": platform.python_version()}


def method_facts(opts: dict[str, Any]) -> dict[str, Any]:
    return {
        "order": "interleaved: " + ", ".join(ARMS) + f" × {opts['repetitions']}",
        "offered_rps": opts["rate"], "spike_offered_rps": 2 * opts["rate"], "clients": opts["clients"],
        "steady_s": opts["steady_s"], "spike_s": opts["spike_s"], "recover_s": opts["recover_s"],
        "settle_s": opts["settle_s"], "burners": opts["burners"],
        "service_request_mcpu": opts["service_request_mcpu"], "batch_request_mcpu": 1000 * len(opts["node_cpus"]), "work_iterations": opts["work_iterations"],
        "latency": "h2load log: request written → end of response; p50/p99/p99.9 outside the spike "
                   "(steady + recovery), pooled over repetitions; spike p99 over the spike's requests",
        "restored_after": f"end of the first {WINDOW_S:g} s window after the spike start beginning 3 windows "
                          f"whose p99 ≤ {RESTORE_RATIO:.2f} × the same repetition's isolated spike p99",
        "wait_share": "schedstat deltas of every service thread every "
                      f"{opts['sched_interval_s'] * 1000:g} ms; an interval's wait counts as > T when its mean wait "
                      "per timeslice exceeds T (or no timeslice ended and it waited > T); share = long wait / "
                      "(cpu time + wait), bucketed by the node cpus' utilisation of that second",
        "batch_cpu_seconds": "batch group cpuacct.usage over the load window",
        "agent_policy": "docs/design.md defaults, grace_s = 0; anti-starvation on",
    }


def add_arguments(parser: argparse.ArgumentParser) -> None:
    cpus = sorted(os.sched_getaffinity(0))
    parser.add_argument("--repetitions", type=int, default=3, help="each arm this many times, interleaved")
    parser.add_argument("--rate", type=float, default=80.0, help="offered requests/s (doubles during the spike)")
    parser.add_argument("--clients", type=int, default=16, help="keep-alive connections (rate is split over them)")
    parser.add_argument("--steady-s", type=float, default=30.0)
    parser.add_argument("--spike-s", type=float, default=30.0)
    parser.add_argument("--recover-s", type=float, default=20.0)
    parser.add_argument("--settle-s", type=float, default=5.0, help="burners (and agent) run this long before the load")
    parser.add_argument("--node-cpus", default=str(cpus[-1]), help="cpuset of the service and the batch")
    parser.add_argument("--client-cpus", default=",".join(map(str, cpus[:-1] or cpus)),
                        help="affinity of the load generator, sampler and agent")
    parser.add_argument("--burners", type=int, help="default: 2 per node cpu")
    parser.add_argument("--service-request-mcpu", type=float, default=500.0,
                        help="the service's cpu request (its peak plus margin; limit = the node cpus)")
    parser.add_argument("--work-iterations", type=int, default=20_000, help="cpu work per request")
    parser.add_argument("--port", type=int, default=26080)
    parser.add_argument("--node-weight", type=int, default=8192,
                        help="cpu.shares of the benchmark's top group against the machine's other load")
    parser.add_argument("--psi-window-s", type=float, default=2.0)
    parser.add_argument("--threshold-ms", type=float, default=150.0)
    parser.add_argument("--tick-s", type=float, default=1.0, help="the agent's mitigation interval")
    parser.add_argument("--sched-interval-s", type=float, default=0.01, help="schedstat sampling interval")
    parser.add_argument("--cgroup-root", default="/sys/fs/cgroup")
    parser.add_argument("--h2load", default="h2load", help="the load generator binary (Debian: nghttp2-client)")
    parser.add_argument("--summary-json", help="write the summary here")
    parser.add_argument("--report-html", help="write the plotly report here")


def options(args: argparse.Namespace) -> dict[str, Any]:
    """Validated options; raises ``ValueError`` naming the flag (nothing has been created yet)."""
    def positive(name: str, value: float, *, zero: bool = False) -> None:
        if not (value > 0 or (zero and value == 0)) or not math.isfinite(value):
            raise ValueError(f"--{name}: must be {'≥' if zero else '>'} 0, got {value:g}")

    for name in ("repetitions", "rate", "clients", "steady_s", "settle_s", "work_iterations", "tick_s",
                 "psi_window_s", "threshold_ms", "sched_interval_s"):
        positive(name.replace("_", "-"), getattr(args, name))
    for name in ("spike_s", "recover_s"):
        positive(name.replace("_", "-"), getattr(args, name), zero=True)
    node, client = cpu_list(args.node_cpus, flag="--node-cpus"), cpu_list(args.client_cpus, flag="--client-cpus")
    if set(node) & set(client) and len(os.sched_getaffinity(0)) > 1:
        raise ValueError(f"--node-cpus {args.node_cpus} and --client-cpus {args.client_cpus} overlap")
    if not 2 <= args.node_weight <= 262144:
        raise ValueError(f"--node-weight: {args.node_weight} is not a cpu.shares value (2–262144)")
    if not 1 <= args.port <= 65535:
        raise ValueError(f"--port: {args.port} is not a TCP port")
    if not 0 < args.service_request_mcpu <= 1000 * len(node):
        raise ValueError(f"--service-request-mcpu: {args.service_request_mcpu:g} is not within (0, {1000 * len(node)}] "
                         "(the node cpus' capacity)")
    burners = 2 * len(node) if args.burners is None else args.burners
    if burners < 1:
        raise ValueError(f"--burners: must be ≥ 1, got {burners}")
    binary = shutil.which(args.h2load)
    if binary is None:
        raise FacilityUnavailable("load generator", args.h2load, "not found (apt-get install nghttp2-client)")
    for flag in ("summary_json", "report_html"):
        path = getattr(args, flag)
        if path and Path(path).is_dir():
            raise ValueError(f"--{flag.replace('_', '-')}: {path} is a directory")
    return {**vars(args), "node_cpus": node, "client_cpus": client, "burners": burners, "h2load": binary,
            "repetitions": int(args.repetitions), "clients": int(args.clients)}


def main(args: argparse.Namespace) -> int:
    try:
        opts = options(args)
    except ValueError as exc:
        print(f"kalena-agent bench interference: {exc}", flush=True)
        return 2
    if opts["report_html"]:
        from agents.bench import interference_report  # needs plotly (the web extra): fail before measuring

        interference_report.require_plotly()
    summary, series = run_benchmark(opts)
    from agents.bench.interference_report import print_table

    print_table(summary)
    if opts["summary_json"]:
        Path(opts["summary_json"]).parent.mkdir(parents=True, exist_ok=True)
        Path(opts["summary_json"]).write_text(json.dumps(summary, indent=2))
    if opts["report_html"]:
        from agents.bench.interference_report import write_report

        write_report(summary, series, Path(opts["report_html"]))
        print(f"report: {opts['report_html']}")
    return 0
