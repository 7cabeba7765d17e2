"""The lab's sampler (``python -m agents.lab.sampler``): the kernel's own figures for the
proposal's live metrics, read while the lab runs — a pod's cgroups vanish when it ends — and
appended to ``<state dir>/metrics.jsonl`` (read by :mod:`agents.lab.livemetrics`).

``up`` starts it after everything else (recorded in ``lab.json`` as the process
``lab-sampler``, shown by ``status``, stopped by ``down``); it stops by itself when the lab's
record is gone. Every ``--interval-s`` (1 s) it writes one ``tick`` line:

    {"type": "tick", "t": <unix s>, "dt": <s since the last tick>, "nodes": {"<node>": {
        "cpu_ns": Δ cpuacct.usage of the node's group, "capacity_ns": node mcpu/1000 × dt × 1e9,
        "util": cpu_ns / capacity_ns, "psi_some_us": Δ the node's cpu.pressure "some" total,
        "tiers": {"production"|"batch"|"system": {"run_ns", "wait_ns", "long_wait_ns", "threads"}}}}}

— per tier, Σ over the node's container threads of the interval's ``/proc/<tid>/schedstat``
deltas: time on a cpu (``run_ns``), time runnable but waiting (``wait_ns``, which includes the
time a CFS quota kept the thread throttled), and ``long_wait_ns``: the waiting of threads whose
mean wait per dispatch this interval (Δwait ÷ Δdispatches; a thread not dispatched at all this
interval counts its whole wait) exceeded 5 ms. The kernel keeps no per-wait histogram outside
tracing, so a thread's waits within one interval are taken as alike; a thread with many short
waits and one long one in the same second is under-counted.

and, for every container (pod container) seen, a ``pod`` line every 10 s while it runs and once
when it has ended:

    {"type": "pod", "t", "node", "container_id", "pod", "uid", "tier", "container",
     "first_seen", "last_seen", "started_at", "finished_at", "exit_code", "ended",
     "throttled_ns", "nr_throttled", "pod_throttled_ns", "cpu_ns", "work_duration_s"}

``throttled_ns`` / ``nr_throttled`` are the container group's v1 ``cpu.stat`` (``throttled_time``,
``pod_throttled_ns`` the pod group's in Kubernetes mode, where the kubelet double sets the pod's limit;
cumulative: the unified tree has no cpu controller on this host, so there is no
``throttled_usec`` there), ``cpu_ns`` its ``cpuacct.usage``; ``started_at`` / ``finished_at``
the engine's nanosecond timestamps (``docker inspect``), else first/last seen;
``work_duration_s`` the pod's work contract (annotation or label
``lab.kalena.naughtian.io/work``: the trace's duration scaled by the lab's speed).

Tier: Kubernetes mode from the pod object (batch: ``schedulerName: kalena`` or the label
``kalena.naughtian.io/tier: batch``; ``system``: namespace ``kalena-system`` or ``kube-system``;
else production); Docker mode from the container's ``kalena.naughtian.io/tier`` label.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import urllib.request
from datetime import datetime
from pathlib import Path
from typing import Any

CGROUP = Path("/sys/fs/cgroup")
LONG_WAIT_NS = 5_000_000
WORK = "lab.kalena.naughtian.io/work"
SAMPLER = "lab-sampler"
METRICS_FILE = "metrics.jsonl"
POD_EVERY_S = 10.0
FINISH_WAIT_S = 120.0
REFRESH_S = 5.0


def _read(path: Path) -> str | None:
    try:
        return path.read_text()
    except OSError:
        return None


def _int(path: Path) -> int | None:
    text = _read(path)
    try:
        return int(text.strip()) if text is not None else None
    except ValueError:
        return None


def _psi_some_total(path: Path) -> int | None:
    text = _read(path)
    if not text:
        return None
    for line in text.splitlines():
        if line.startswith("some "):
            return int(dict(kv.split("=") for kv in line.split()[1:])["total"])
    return None


def _cpu_stat(group: Path) -> dict[str, int]:
    text = _read(group / "cpu.stat") or ""
    return {k: int(v) for k, v in (line.split() for line in text.splitlines() if len(line.split()) == 2)}


def _schedstat(tid: str) -> tuple[int, int, int] | None:
    text = _read(Path(f"/proc/{tid}/schedstat"))
    if not text:
        return None
    parts = text.split()
    return int(parts[0]), int(parts[1]), int(parts[2])


def _docker_time(text: str | None) -> float | None:
    """The engine's RFC 3339 nanosecond time → Unix seconds (``None`` for the zero time)."""
    if not text or text.startswith("0001-"):
        return None
    head, _, frac = text.rstrip("Z").partition(".")
    digits = "".join(ch for ch in frac if ch.isdigit())
    base = datetime.fromisoformat(head + "+00:00").timestamp()
    return base + (int(digits) / 10 ** len(digits) if digits else 0.0)


def _work_duration(labels: dict[str, str], annotations: dict[str, str]) -> float | None:
    text = annotations.get(WORK) or labels.get(WORK)
    if not text:
        return None
    try:
        return float(json.loads(text)["duration_s"])
    except (ValueError, KeyError, TypeError):
        return None


class Sampler:
    """One lab's sampler (module doc). ``state`` is the lab's record."""

    def __init__(self, state: dict[str, Any], out: Path, *, interval_s: float = 1.0) -> None:
        self.state, self.out, self.interval_s = state, out, interval_s
        self.kubernetes = state.get("orchestrator") == "kubernetes"
        self.prev_node: dict[str, tuple[float, int | None, int | None]] = {}
        self.prev_thread: dict[str, tuple[int, int, int]] = {}
        self.pods: dict[str, dict[str, Any]] = {}          # container id → its pod line
        self.meta: dict[str, dict[str, Any]] = {}          # container id → labels, node (engine list)
        self.api_pods: dict[str, dict[str, Any]] = {}      # uid → pod object
        self.refreshed = -1e18
        self.finishing: dict[str, dict[str, Any]] = {}   # ended, their engine not asked yet

    # -- who is who -----------------------------------------------------------------------------

    def refresh(self) -> None:
        from agents.lab import nodes as machinery

        for record in self.state["nodes"]:
            try:
                client = machinery.engine_client(f"unix://{record['socket']}", timeout_s=5)
                try:
                    for c in client.api.containers(all=True):
                        self.meta[c["Id"]] = {"node": record["name"], "labels": c.get("Labels") or {}}
                finally:
                    client.close()
            except Exception:  # noqa: BLE001 - the engine is down (a fault): keep what is known
                pass
        if self.kubernetes:
            try:
                with urllib.request.urlopen(self.state["apiserver"]["url"] + "/api/v1/pods", timeout=10) as r:  # noqa: S310
                    self.api_pods = {p["metadata"]["uid"]: p for p in json.loads(r.read()).get("items") or []}
            except (OSError, ValueError):
                pass
        self.refreshed = time.monotonic()

    def identify(self, cid: str) -> dict[str, Any]:
        meta = self.meta.get(cid) or {}
        labels = meta.get("labels") or {}
        uid = labels.get("io.kubernetes.pod.uid")
        if self.kubernetes and uid:
            pod = self.api_pods.get(uid) or {}
            m, spec = pod.get("metadata") or {}, pod.get("spec") or {}
            ns = m.get("namespace") or labels.get("io.kubernetes.pod.namespace", "")
            if spec.get("schedulerName") == "kalena" or (m.get("labels") or {}).get("kalena.naughtian.io/tier") == "batch":
                tier = "batch"
            elif ns in ("kalena-system", "kube-system"):
                tier = "system"
            else:
                tier = "production" if pod else "unknown"
            return {"pod": f"{ns}/{m.get('name') or labels.get('io.kubernetes.pod.name', '')}", "uid": uid,
                    "tier": tier, "container": labels.get("io.kubernetes.container.name", ""),
                    "work_duration_s": _work_duration(labels, m.get("annotations") or {})}
        tier = labels.get("kalena.naughtian.io/tier", "unknown")
        return {"pod": labels.get("kalena.naughtian.io/workload", cid[:12]), "uid": None,
                "tier": "production" if tier in ("service", "production") else tier, "container": "",
                "work_duration_s": _work_duration(labels, {})}

    # -- one tick -------------------------------------------------------------------------------

    def _groups(self, node_cgroup: str) -> dict[str, Path]:
        """Container id → its cpu-hierarchy group, anywhere under the node's subtree."""
        out = {}
        top = CGROUP / "cpu" / node_cgroup
        for dirpath, dirnames, _ in os.walk(top):
            for d in dirnames:
                if len(d) == 64 and all(ch in "0123456789abcdef" for ch in d):
                    out[d] = Path(dirpath) / d
        return out

    def tick(self, now_s: float) -> list[dict[str, Any]]:
        if time.monotonic() - self.refreshed > REFRESH_S:
            self.refresh()
        lines: list[dict[str, Any]] = []
        nodes: dict[str, Any] = {}
        seen: set[str] = set()
        dt_all = None
        for record in self.state["nodes"]:
            name, rel = record["name"], record["cgroup"]
            cpu = _int(CGROUP / "cpuacct" / rel / "cpuacct.usage")
            psi = _psi_some_total(CGROUP / "unified" / rel / "cpu.pressure")
            prev = self.prev_node.get(name)
            self.prev_node[name] = (now_s, cpu, psi)
            groups = self._groups(rel)
            tiers: dict[str, dict[str, int]] = {}
            for cid, group in groups.items():
                if cid not in self.meta and time.monotonic() - self.refreshed > 1.0:
                    self.refresh()
                who = self.identify(cid)
                seen.add(cid)
                agg = tiers.setdefault(who["tier"], {"run_ns": 0, "wait_ns": 0, "long_wait_ns": 0, "threads": 0})
                for tid in (_read(group / "tasks") or "").split():
                    stat = _schedstat(tid)
                    if stat is None:
                        continue
                    key = f"{cid}:{tid}"
                    before = self.prev_thread.get(key)
                    self.prev_thread[key] = stat
                    agg["threads"] += 1
                    if before is None:
                        continue
                    run, wait, slices = (stat[i] - before[i] for i in range(3))
                    agg["run_ns"] += run
                    agg["wait_ns"] += wait
                    if wait > 0 and (slices <= 0 or wait / slices > LONG_WAIT_NS):
                        agg["long_wait_ns"] += wait
                cpu_stat = _cpu_stat(group)
                # Kubernetes mode: the pod's own group (pod<uid>) holds the pod's limit, as the kubelet sets it
                pod_stat = _cpu_stat(group.parent) if group.parent.name.startswith("pod") else {}
                pod = self.pods.get(cid)
                if pod is None:
                    pod = self.pods[cid] = {"type": "pod", "node": name, "container_id": cid, **who,
                                            "first_seen": now_s, "started_at": None, "finished_at": None,
                                            "exit_code": None, "ended": False, "_written": -1e18}
                elif pod["tier"] == "unknown" and who["tier"] != "unknown":
                    pod.update(who)
                pod.update(last_seen=now_s, throttled_ns=cpu_stat.get("throttled_time", 0),
                           pod_throttled_ns=pod_stat.get("throttled_time"),
                           nr_throttled=cpu_stat.get("nr_throttled", 0),
                           cpu_ns=_int(CGROUP / "cpuacct" / group.relative_to(CGROUP / "cpu") / "cpuacct.usage"))
                if now_s - pod["_written"] >= POD_EVERY_S:
                    lines.append(self._pod_line(pod, now_s))
            entry: dict[str, Any] = {"tiers": tiers}
            if prev is not None and cpu is not None and prev[1] is not None:
                dt = now_s - prev[0]
                dt_all = dt
                capacity = record["cpu_mcpu"] / 1000 * dt * 1e9
                entry.update(cpu_ns=cpu - prev[1], capacity_ns=int(capacity),
                             util=round((cpu - prev[1]) / capacity, 4) if capacity > 0 else None,
                             psi_some_us=(psi - prev[2]) if psi is not None and prev[2] is not None else None)
            nodes[name] = entry
        for key in [k for k in self.prev_thread if k.split(":", 1)[0] not in seen]:
            del self.prev_thread[key]
        for cid in [c for c in self.pods if c not in seen]:
            self.finishing[cid] = self.pods.pop(cid)
        for cid, pod in list(self.finishing.items()):
            # the engine may be down (an engine-stop fault): ask again next tick, for up to FINISH_WAIT_S
            if self._finish(pod) or now_s - pod["last_seen"] > FINISH_WAIT_S:
                del self.finishing[cid]
                lines.append(self._pod_line(pod, now_s))
        lines.insert(0, {"type": "tick", "t": round(now_s, 3), "dt": round(dt_all, 3) if dt_all else None,
                         "nodes": nodes})
        return lines

    def _pod_line(self, pod: dict[str, Any], now_s: float) -> dict[str, Any]:
        pod["_written"] = now_s
        return {k: v for k, v in pod.items() if not k.startswith("_")} | {"t": round(now_s, 3)}

    def _finish(self, pod: dict[str, Any]) -> bool:
        """The container's group is gone: ask its engine when it started and finished and how it
        exited. Returns False when the engine did not answer (ask again later)."""
        from docker.errors import NotFound

        from agents.lab import nodes as machinery

        pod["ended"] = True
        record = next((r for r in self.state["nodes"] if r["name"] == pod["node"]), None)
        if record is None:
            return True
        try:
            client = machinery.engine_client(f"unix://{record['socket']}", timeout_s=5)
            try:
                inspect = client.api.inspect_container(pod["container_id"])
            finally:
                client.close()
        except NotFound:          # removed already (Docker mode's watch removes ended containers)
            return True
        except Exception:  # noqa: BLE001 - the engine is down: first/last seen stand unless it answers later
            return False
        st = inspect.get("State") or {}
        pod["started_at"] = _docker_time(st.get("StartedAt"))
        pod["finished_at"] = _docker_time(st.get("FinishedAt"))
        pod["exit_code"] = st.get("ExitCode")
        return True

    def run(self, state_dir: Path, *, stop_after_s: float | None = None) -> None:
        from agents.lab.state import state_read

        end = None if stop_after_s is None else time.monotonic() + stop_after_s
        next_at = time.monotonic()
        with open(self.out, "a", encoding="utf-8") as f:
            while end is None or time.monotonic() < end:
                if state_read(state_dir) is None:
                    break
                for line in self.tick(time.time()):
                    f.write(json.dumps(line, separators=(",", ":")) + "\n")
                f.flush()
                next_at += self.interval_s
                time.sleep(max(0.0, next_at - time.monotonic()))
            for pod in list(self.pods.values()) + list(self.finishing.values()):   # stopping: what is known
                f.write(json.dumps(self._pod_line(pod, time.time()), separators=(",", ":")) + "\n")


def sampler_start(state_dir: Path, *, interval_s: float = 1.0) -> dict[str, Any]:
    """Start the sampler for the lab recorded in ``state_dir`` and record it in ``lab.json``
    (``processes``: ``lab-sampler``); returns its process record."""
    from agents.lab.kubernetes import _start
    from agents.lab.state import process_ref, state_read, state_write

    state = state_read(state_dir)
    logs = Path(state["logs"])
    argv = [sys.executable, "-m", "agents.lab.sampler", "--state-dir", str(state_dir), "--interval-s", f"{interval_s:g}"]
    proc = _start(argv, {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "PYTHONUNBUFFERED": "1"},
                  logs / "sampler.log")
    record = {"name": SAMPLER, "workload": f"lab/{SAMPLER}", "container": SAMPLER, "argv": argv,
              "address": state["console"].get("address", ""), "log": str(logs / "sampler.log"),
              "process": process_ref(proc.pid), "node": "", "probes": {}, "ignored": [], "env": {}, "directory": "",
              "substitutions": [f"the lab's sampler: each node's schedstat, PSI and cpu use and each pod container's "
                                f"throttling every {interval_s:g} s into {Path(state_dir) / METRICS_FILE}"]}
    state = state_read(state_dir)
    state.setdefault("processes", []).append(record)
    state_write(state_dir, state)
    return record


def main(argv: list[str] | None = None) -> int:
    from agents.lab.state import state_read

    parser = argparse.ArgumentParser(prog="python -m agents.lab.sampler", description=__doc__.split("\n\n")[0])
    parser.add_argument("--state-dir", type=Path, required=True)
    parser.add_argument("--interval-s", type=float, default=1.0)
    parser.add_argument("--stop-after-s", type=float, default=None)
    args = parser.parse_args(argv)
    state = state_read(args.state_dir)
    if state is None:
        print(f"no lab recorded in {args.state_dir}", file=sys.stderr)
        return 2
    Sampler(state, args.state_dir / METRICS_FILE, interval_s=args.interval_s).run(
        args.state_dir, stop_after_s=args.stop_after_s)
    return 0


if __name__ == "__main__":
    sys.exit(main())
