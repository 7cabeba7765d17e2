"""``kalena lab run``: a lab day measured against its replay (docs/lab.md "A measured day").

1. **Up.** ``kalena lab up --orchestrator kubernetes`` with the slice and the day's options, as
   a subprocess: the run always starts its own lab (a lab already recorded in the state folder
   is refused), so the scaled policy is the live cluster's first version and the day starts
   with nothing else on the nodes.
2. **Play and watch.** ``kalena lab play`` (a subprocess; its lines are the progress), while a
   sampler reads, every second: each node's PSI (``unified/<node>/cpu.pressure``,
   ``memory.pressure``), the host's (``/proc/pressure/cpu``), and every memory cgroup's
   ``oom_kill`` count under the node (``memory.oom_control``: cgroup v1 counts an OOM kill only
   in the group where it happened, so the whole subtree is walked and each group's highest count
   kept), and each node's memory held outside its pods' rows (:func:`unaccounted_bytes`, what the
   agent's ledger counts as ``unaccounted``; the replay holds each node's median of it). With ``--faults default`` the faults are run at 20/40/60/80 % of the day with
   ``kalena lab fault`` (another command's; its lines in ``faults.jsonl`` go onto the timeline).
   The day lasts ``hours · 3600 / k`` s of wall time from the play's start.
3. **Collect** from the lab's own database (a script run with the console's environment): batch
   pods (bound, ended, outcome, node, request), the agents' actions (evictions with their why,
   throttles, PSI-triggered actions), the nodes' ledgers and blueprint-check findings.
4. **Replay** the same slice (:mod:`kalena_engine.labslice.replay`) on the simulated clock with
   the scaled policy on that clock, and compare figure by figure (:mod:`agents.lab.runfigures`).
5. **Down** unless ``--keep``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from agents.lab.errors import LabError
from agents.lab.state import state_read

ROOT = Path(__file__).resolve().parents[2]
CGROUP = Path("/sys/fs/cgroup")
FAULT_PLAN = (("agent-restart", 0.2, None), ("leader-kill", 0.4, None), ("engine-stop", 0.6, "hour"),
              ("db-restart", 0.8, None))

COLLECT = r"""
import json, sys
import django
django.setup()
from kalena_web.inventory.models import Node
from kalena_web.ledger.models import LiveNodeLedger
from kalena_web.scheduling.models import BatchPod
from kalena_web.telemetry.models import MitigationEvent
cluster = sys.argv[1]
def vec(v):
    return [float(x) for x in v] if v is not None else None
nodes = []
for n in Node.objects.filter(cluster__name=cluster).order_by("row"):
    led = LiveNodeLedger.objects.filter(node=n).first()
    nodes.append({"name": n.name, "capacity": vec(led.capacity) if led else vec(n.capacity),
                  "prod_request": vec(led.prod_request) if led else None,
                  "blueprint_violations": (led.blueprint_violations or []) if led else []})
pods = [{"name": p.workload.name, "state": p.state, "outcome": p.outcome, "reason": p.reason,
         "bound_s": p.bound_s, "ended_s": p.ended_s, "admitted_s": p.admitted_s,
         "node": p.ran_on or (p.workload.node.name if p.workload.node_id else ""),
         "request": vec(p.workload.request)}
        for p in BatchPod.objects.filter(cluster__name=cluster).select_related("workload", "workload__node")]
events = [{"ts": e.ts, "node": e.node.name, "action": e.action, "reason": e.reason, "workload": e.workload_name,
           "tier": e.tier, "priority": e.priority, "trigger_source": e.trigger_source,
           "trigger_resource": e.trigger_resource, "numbers": e.numbers, "ok": e.result_ok}
          for e in MitigationEvent.objects.filter(node__cluster__name=cluster).select_related("node").order_by("ts")]
print(json.dumps({"nodes": nodes, "batch_pods": pods, "events": events}))
"""


def _cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "kalena_web.cli", "lab", *args]


def _stream(argv: list[str], say: Callable[[str], None], prefix: str, timeout_s: float) -> int:
    proc = subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    end = time.monotonic() + timeout_s
    assert proc.stdout is not None
    for line in proc.stdout:
        say(f"{prefix}{line.rstrip()}")
        if time.monotonic() > end:
            proc.kill()
            raise LabError(f"{' '.join(argv[3:5])} did not finish within {timeout_s:.0f} s", source="kalena lab run",
                           field=argv[4] if len(argv) > 4 else "lab")
    return proc.wait()


def _read(path: Path) -> str | None:
    try:
        return path.read_text()
    except OSError:
        return None


def _psi(path: Path) -> dict[str, float] | None:
    """``{"avg10", "total_us"}`` of a ``*.pressure`` file's ``some`` line, or None."""
    text = _read(path)
    if not text:
        return None
    for line in text.splitlines():
        if line.startswith("some "):
            fields = dict(f.split("=", 1) for f in line.split()[1:])
            return {"avg10": float(fields["avg10"]), "total_us": float(fields["total"])}
    return None


def _working_set(group: Path) -> float | None:
    """A cgroup v1 memory group's working set, as the agent reads it: ``memory.usage_in_bytes``
    less ``total_inactive_file`` (bytes); None when unreadable."""
    usage, stat = _read(group / "memory.usage_in_bytes"), _read(group / "memory.stat")
    if usage is None or stat is None:
        return None
    try:
        inactive = next((int(line.split()[1]) for line in stat.splitlines()
                         if line.startswith("total_inactive_file ")), 0)
        return float(int(usage) - inactive)
    except (ValueError, IndexError):
        return None


def _daemonset_requests(kubelet_url: str) -> dict[str, float] | None:
    """The node's DaemonSet pods, ``uid → Σ memory requests`` (bytes), from the kubelet double's
    ``/pods``; None when it does not answer."""
    import httpx

    from agents.lab.runfigures import daemonset_memory_requests

    try:
        pods = httpx.get(f"{kubelet_url}/pods", timeout=2.0).json().get("items") or []
    except (httpx.HTTPError, ValueError):
        return None
    return daemonset_memory_requests(pods)


def pod_working_sets(kubepods: Path) -> tuple[float, dict[str, float]] | None:
    """``(W, {uid: working set})`` in bytes: the working set of the node's ``kubepods`` group and
    of each pod group in it, as the agent reads them (:func:`_working_set`). Pod groups are
    ``pod<uid>`` directly under ``kubepods`` (Guaranteed) or under ``kubepods/burstable`` /
    ``besteffort``; a pod group that cannot be read is left out. None when ``kubepods`` is
    unreadable."""
    total = _working_set(kubepods)
    if total is None:
        return None
    pods: dict[str, float] = {}
    for parent in (kubepods, kubepods / "burstable", kubepods / "besteffort"):
        try:
            names = [e.name for e in os.scandir(parent) if e.is_dir() and e.name.startswith("pod")]
        except OSError:
            continue
        for name in names:
            used = _working_set(parent / name)
            if used is not None:
                pods[name[3:]] = used
    return total, pods


def unaccounted_bytes(total: float, pods: dict[str, float], daemonset_request: dict[str, float]) -> float:
    """Memory the node's pods group holds outside every pod's row, as the agent's ``unaccounted``
    term counts it (docs/design.md §7) with ``--reserved`` 0: ``max(0, W − Σ_pods accounted)``,
    ``W`` and the pods' working sets from :func:`pod_working_sets`, a pod accounting for its own
    working set, a DaemonSet pod for ``min(its working set, its memory request)``. Example: W
    450 MiB; pods 300 + 70 MiB, a DaemonSet pod using 3 MiB of a 2 MiB request → 450 − 370 − 2 =
    78 MiB."""
    accounted = sum(min(used, daemonset_request[uid]) if uid in daemonset_request else used
                    for uid, used in pods.items())
    return max(0.0, total - accounted)


class Sampler(threading.Thread):
    """Every ``every_s``: node and host PSI, every memory group's oom_kill under each node, and
    (Kubernetes mode) each node's pods' working sets and the memory held outside their rows
    (:meth:`_memory`; the DaemonSet pods re-read from the kubelet double every 10 s); every ``ledger_every_s`` the
    console's node ledgers (:func:`console_ledgers`, kept in ``ledgers``)."""

    def __init__(self, state: dict[str, Any], every_s: float = 1.0, root: Path = CGROUP,
                 ledger_every_s: float = 10.0) -> None:
        super().__init__(daemon=True)
        self.state, self.every_s, self.root = state, every_s, root
        self.samples: list[dict[str, Any]] = []
        #: the console's node ledgers every ``ledger_every_s`` (:func:`console_ledgers`)
        self.ledgers: list[dict[str, Any]] = []
        self.ledger_every_s = ledger_every_s
        self._ledger_read_at = -1e18
        self.oom: dict[str, dict[str, int]] = {}     # node → {group path: highest oom_kill}
        self.stop = threading.Event()
        self._daemonsets: dict[str, tuple[float, dict[str, float]]] = {}   # node → (read at, uid → request)

    def _memory(self, node: dict[str, Any], group: str, now: float) -> dict[str, Any]:
        """The node's memory as the agent reads it: ``kubepods_ws_bytes`` (W), ``pod_ws_bytes``
        (pod uid → working set) and ``unaccounted_bytes`` (Kubernetes mode; None elsewhere or
        while unreadable)."""
        url = node.get("kubelet_url")
        read = pod_working_sets(self.root / "memory" / group / "kubepods") if url else None
        if read is None:
            return {"unaccounted_bytes": None}
        seen_at, requests = self._daemonsets.get(node["name"], (-1e18, {}))
        if now - seen_at >= 10.0:
            fresh = _daemonset_requests(url)
            if fresh is not None:
                requests = fresh
                self._daemonsets[node["name"]] = (now, requests)
        total, pods = read
        return {"unaccounted_bytes": unaccounted_bytes(total, pods, requests), "kubepods_ws_bytes": total,
                "pod_ws_bytes": {uid: round(v) for uid, v in pods.items()}}

    def _oom(self, node: str, group: str) -> None:
        base = self.root / "memory" / group
        seen = self.oom.setdefault(node, {})
        for dirpath, _dirs, files in os.walk(base):
            if "memory.oom_control" in files:
                text = _read(Path(dirpath) / "memory.oom_control") or ""
                for line in text.splitlines():
                    if line.startswith("oom_kill "):
                        count = int(line.split()[1])
                        if count:
                            rel = os.path.relpath(dirpath, base)
                            seen[rel] = max(seen.get(rel, 0), count)

    def run(self) -> None:
        while not self.stop.is_set():
            now = time.time()
            row: dict[str, Any] = {"ts": now, "host_cpu": _psi(Path("/proc/pressure/cpu")), "nodes": {}}
            for node in self.state["nodes"]:
                group = node["cgroup"] if "cgroup" in node else f"{self.state['cgroup_root']}/{node['name']}"
                row["nodes"][node["name"]] = {"cpu": _psi(self.root / "unified" / group / "cpu.pressure"),
                                              "memory": _psi(self.root / "unified" / group / "memory.pressure"),
                                              **self._memory(node, group, now)}
                try:
                    self._oom(node["name"], group)
                except OSError:
                    pass
            self.samples.append(row)
            if now - self._ledger_read_at >= self.ledger_every_s:
                self._ledger_read_at = now
                nodes = console_ledgers(self.state)
                if nodes is not None:
                    self.ledgers.append({"ts": now, "nodes": nodes})
            self.stop.wait(self.every_s)


LEDGER_SQL = ("SELECT n.name AS name, l.capacity AS capacity, l.prod_request AS prod_request, "
              "l.prod_reservation AS prod_reservation, l.batch_request AS batch_request, l.usage AS usage, "
              "l.stale AS stale FROM ledger_livenodeledger l JOIN inventory_node n ON n.id = l.node_id "
              "JOIN inventory_cluster c ON c.id = n.cluster_id WHERE c.name = %s")


def console_ledgers(state: dict[str, Any]) -> dict[str, dict[str, Any]] | None:
    """Each node's ledgers as the console holds them now (``LiveNodeLedger``, docs/design.md §6):
    node → ``{"capacity", "prod_request", "prod_reservation", "batch_request", "usage"}`` as
    ``[cpu mcpu, memory bytes]``, and ``"stale"``; None while the database does not answer (a
    fault inside the day). What the scheduler placed batch against, so a day can be compared with
    its replay's ledgers step by step (:func:`agents.lab.runfigures.ledger_divergence`)."""
    from agents.lab.invariants import database_url, query

    try:
        rows = query(database_url(state), LEDGER_SQL, (console_cluster(state),))
    except Exception:  # noqa: BLE001 - a restarted or absent database: this read is skipped
        return None
    out: dict[str, dict[str, Any]] = {}
    for row in rows:
        entry: dict[str, Any] = {"stale": bool(row["stale"])}
        for key in ("capacity", "prod_request", "prod_reservation", "batch_request", "usage"):
            value = row[key]
            if isinstance(value, str):
                value = json.loads(value)
            entry[key] = None if value is None else [float(v) if v is not None else None for v in value[:2]]
        out[str(row["name"])] = entry
    return out


def console_cluster(state: dict[str, Any]) -> str:
    """The lab's cluster name in the console's database."""
    console = next((p for p in state.get("processes") or [] if p["name"] == "kalena-console"), None)
    return ((console or {}).get("env") or {}).get("KALENA_AGENT_TOKENREVIEW_CLUSTER") or "lab"


def collect_console(state: dict[str, Any]) -> dict[str, Any]:
    """The lab database's batch pods, agents' actions and ledgers (module doc, step 3).

    Raises:
        LabError: the script failed (its error quoted).
    """
    console = next((p for p in state["processes"] if p["name"] == "kalena-console"), None)
    if console is None:
        raise LabError("no console process is recorded", source="lab.json", field="processes")
    script = Path(state["directory"]) / "collect-run.py"
    script.write_text(COLLECT)
    cluster = console_cluster(state)
    done = subprocess.run([sys.executable, str(script), cluster], env=console["env"], cwd=ROOT, capture_output=True,
                          text=True, timeout=300, check=False)
    if done.returncode != 0:
        raise LabError(f"collecting the day failed: {done.stderr.strip()[-800:]}", source=str(script), field="console")
    return json.loads(done.stdout)


def _run_faults(state_dir: Path, day_s: float, speed: float, play_start: float, say: Callable[[str], None],
                errors: list[str]) -> None:
    """Each fault of :data:`FAULT_PLAN` at its own share of the day, on its own thread: a long one
    (the engine stopped for a simulated hour) does not push the next one later."""
    def one(kind: str, share: float, length: str) -> None:
        wait = play_start + share * day_s - time.time()
        if wait > 0:
            time.sleep(wait)
        argv = _cli("fault", kind, "--state-dir", str(state_dir))
        if length == "hour":
            argv += ["--for", f"{3600.0 / speed:g}"]
        done = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=600 + 3600.0 / speed,
                              check=False)
        line = (done.stdout.strip() or done.stderr.strip()).splitlines()[-1:] or [""]
        say(f"run: fault {kind} at {share:.0%} of the day: exit {done.returncode} {line[0]}")
        if done.returncode != 0:
            errors.append(f"{kind}: exit {done.returncode}: {(done.stderr or done.stdout).strip()[-300:]}")

    threads = [threading.Thread(target=one, args=plan, daemon=True) for plan in FAULT_PLAN]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()


def fault_command_exists() -> bool:
    """Whether ``kalena lab fault`` is registered (another change provides it)."""
    done = subprocess.run(_cli("fault", "--help"), cwd=ROOT, capture_output=True, text=True, timeout=60, check=False)
    return done.returncode == 0


def read_faults(state_dir: Path, since_s: float = 0.0) -> list[dict[str, Any]]:
    """``<state dir>/faults.jsonl`` rows started at or after ``since_s`` (Unix s; the file is kept
    across labs, so a day passes its lab's start; none when missing); a malformed line is kept
    as ``{"kind": "unreadable", "detail": line}``."""
    path = state_dir / "faults.jsonl"
    out = []
    for line in (_read(path) or "").splitlines():
        if line.strip():
            try:
                row = json.loads(line)
            except ValueError:
                out.append({"kind": "unreadable", "detail": line[:200]})
                continue
            if not isinstance(row.get("started_at"), int | float) or row["started_at"] >= since_s:
                out.append(row)
    return out


def save_day(path: Path, day: dict[str, Any]) -> None:
    """Write the collected day as JSON (paths as text)."""
    path.write_text(json.dumps({**day, "slice_dir": str(day["slice_dir"])}), encoding="utf-8")


def load_day(path: Path) -> dict[str, Any]:
    """A day written by :func:`save_day`.

    Raises:
        LabError: the file is missing or not a saved day.
    """
    try:
        day = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise LabError(f"cannot read a saved day ({exc})", source=str(path), field="--from-day") from None
    if not isinstance(day, dict) or "slice_dir" not in day or "console" not in day:
        raise LabError("not a day saved by `kalena lab run`", source=str(path), field="--from-day")
    day["slice_dir"] = Path(day["slice_dir"])
    # a day saved before read_faults took the lab's start may hold an earlier lab's faults
    since = float((day.get("state") or {}).get("started_s") or 0.0)
    day["faults"] = [f for f in day.get("faults") or []
                     if not isinstance(f.get("started_at"), int | float) or f["started_at"] >= since]
    return day


def run_day(*, state_dir: Path, up_args: list[str], faults: str = "none", keep: bool = False,
            say: Callable[[str], None] = print, settle_s: float = 0.0) -> dict[str, Any]:
    """Steps 1–3 and 5 of the module doc; returns ``{"state", "console", "sampler", "faults",
    "play_start_s", "day_s", "slice_dir", "compression", "livemetrics"}`` for the comparison.

    Raises:
        LabError: a lab already recorded, ``up`` or ``play`` failed, or ``--faults default``
            without ``kalena lab fault``.
    """
    state_dir = Path(state_dir).resolve()
    if state_read(state_dir) is not None:
        raise LabError(f"a lab is already recorded in {state_dir}", source=str(state_dir / "lab.json"),
                       field="kalena lab run", accepted="`kalena lab down` first (run starts its own lab)")
    if faults == "default" and not fault_command_exists():
        raise LabError("`kalena lab fault` does not exist in this checkout", source="kalena lab run",
                       field="--faults default", accepted="--faults none, or a checkout with `kalena lab fault`")
    say("run: bringing the lab up")
    code = _stream(_cli("up", "--orchestrator", "kubernetes", "--state-dir", str(state_dir), *up_args), say, "  up: ",
                   timeout_s=1800)
    if code != 0:
        raise LabError(f"`kalena lab up` exited {code} (its lines above)", source="kalena lab run", field="up")
    state = state_read(state_dir)
    slice_dir = Path(state["slice"]["directory"])
    summary = json.loads((slice_dir / "summary.json").read_text())
    speed = float(summary["config"]["speed"])
    day_s = float(summary["config"]["hours"]) * 3600.0 / speed
    b = summary["batch"]
    say(f"run: batch sampled to load factor {b['load_factor']:g} over the lab's slack ({summary['slack']['m_s']:,.0f} "
        f"m·s of wall time): measured {b['measured_load_factor']:.3f}, {b['arrivals']} arrivals, {b['pods']} pods; "
        f"durations floored at {b['min_wall_s']:g} s of wall time ({b['floored_tasks']} of the window's tasks floored)")
    sampler = Sampler(state)
    sampler.start()
    fault_errors: list[str] = []
    try:
        if settle_s > 0:
            time.sleep(settle_s)
        play_start = time.time()
        fault_thread = None
        if faults == "default":
            fault_thread = threading.Thread(target=_run_faults, args=(state_dir, day_s, speed, play_start, say,
                                                                       fault_errors), daemon=True)
            fault_thread.start()
        say(f"run: playing the day: {day_s:.0f} s of wall time ({summary['config']['hours']:g} h at {speed:g}×)")
        code = _stream(_cli("play", "--state-dir", str(state_dir)), say, "  ", timeout_s=day_s + 600)
        if code != 0:
            raise LabError(f"`kalena lab play` exited {code}", source="kalena lab run", field="play")
        state = state_read(state_dir)
        play_start = float((state.get("play") or {}).get("started_s") or play_start)
        while time.time() < play_start + day_s:
            left = play_start + day_s - time.time()
            say(f"run: the day runs {left:.0f} s more (t+{time.time() - play_start:.0f} s of {day_s:.0f} s)")
            time.sleep(min(30.0, max(0.5, left)))
        if fault_thread is not None:
            fault_thread.join(timeout=3600.0 / speed + 300)
        day_end = play_start + day_s
        sampler.stop.set()
        sampler.join(timeout=10)
        console = collect_console(state)
        from agents.lab.kubernetes import kubectl

        pods = json.loads(kubectl(state, "get", "pods", "-A", "-o", "json", timeout_s=120).stdout)["items"]
        livemetrics = None
        try:
            from agents.lab import livemetrics as lm   # another change provides it
        except ImportError:
            lm = None
        if lm is not None:
            livemetrics = lm.collect(state, play_start, day_end)
        from agents.lab import invariants

        checked = invariants.check(state)
        say(f"run: after the day: {checked['counts']['lost']} batch pod(s) lost, {checked['counts']['double_bound']} "
            f"double-bound, {checked['counts']['production_evictions']} production eviction(s) "
            f"(of {checked['batch_pods']} batch pods; `kalena lab check`)")
        day = {"state": state, "console": console, "invariants": checked, "samples": sampler.samples, "oom": sampler.oom,
                "ledgers": sampler.ledgers,
                "faults": read_faults(state_dir, float(state.get("started_s") or 0.0)), "fault_errors": fault_errors, "play_start_s": play_start,
                "day_s": day_s, "slice_dir": slice_dir, "slice_summary": summary,
                "compression": json.loads((slice_dir / "compression.json").read_text()),
                "livemetrics": livemetrics, "pods": pods}
        save_day(state_dir / "run-day.json", day)
        say(f"run: the day's raw figures saved to {state_dir / 'run-day.json'} (`kalena lab run --from-day` "
            "recomputes the comparison from them)")
        return day
    finally:
        sampler.stop.set()
        if not keep:
            say("run: taking the lab down (--keep keeps it)")
            _stream(_cli("down", "--state-dir", str(state_dir)), say, "  down: ", timeout_s=600)
