"""``kalena lab fault KIND``: one fault injected into a running lab, then waited out (docs/lab.md
"Faults").

Kinds (each recorded as one JSON line of ``<state dir>/faults.jsonl``: ``kind``, ``node``,
``started_at`` (when the fault was injected), ``ended_at`` (when it was seen recovered, or given
up on), ``recovered``, ``detail``; times in Unix seconds):

* ``agent-restart`` — SIGKILL one node's agent (default the first node) and start it again with
  the command line and environment ``up`` gave it (recorded again in ``lab.json``). Recovered:
  its ``/healthz`` is ``ok`` and its link to the console is connected (it streams again, from
  the buffer it kept on disk).
* ``leader-kill`` — Kubernetes mode: SIGKILL the process holding the scheduler Lease
  (``kube-system/kalena-scheduler``: its ``holderIdentity`` is ``<host>-<pid>``, matched against
  the control-plane processes of ``lab.json``). The lab runs one process per Deployment, so no
  standby is there to take over: the killed scheduler is started again as ``up`` started it,
  and it takes the Lease once the dead holder's lease has expired (a killed holder never releases
  it) — the failover gap a standby would see too. Recovered: a new ``holderIdentity`` with a
  renewal after the kill. Docker and Swarm mode: the scheduling loops run inside the console
  (``kalena serve``), which is killed and started again; recovered: the console answers and
  every agent is linked again.
* ``engine-stop`` — stop one node's Docker engine (SIGTERM: dockerd stops its containers, as a
  ``systemctl stop docker`` does), keep it stopped for ``--for`` seconds (default 10), start it
  again with the same flags (recorded again). Recovered: the engine answers, the node's agent is
  healthy again, and in Kubernetes mode its kubelet double answers and the Node is ``Ready``
  with a heartbeat after the restart.
* ``db-restart`` — the control plane's database (Kubernetes mode with a PostgreSQL
  ``--database-url``: the lab's own database ``kalena_labdb_<name>`` on that server). The
  server is the machine's, shared with other users, so it is not restarted: for ``--for``
  seconds (default 5) the lab's database refuses connections (``ALLOW_CONNECTIONS false``) and
  every open connection to it is terminated (``pg_terminate_backend``), then it accepts them
  again. To the control plane this is what a database restart is — every connection dropped,
  new ones refused for the downtime, then accepted; what it does not model is the server's own
  crash recovery (WAL replay) and a restart of the shared buffers' cache. Recovered: every
  control-plane process alive with its readiness probe passing. A lab whose database is a SQLite
  file inside the console's process (Docker and Swarm mode) has no database server: refused.

Bad input (an unknown kind, a node the lab does not have, a kind the lab cannot take) raises
:class:`~agents.lab.errors.LabError` before anything is changed (exit status 2).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

from agents.lab import nodes as machinery
from agents.lab.budget import NodePlan
from agents.lab.errors import LabError
from agents.lab.kubelets import kubelet_health
from agents.lab.lab import agent_health, recorded
from agents.lab.state import alive, process_ref, state_read, state_write

KINDS = ("agent-restart", "leader-kill", "engine-stop", "db-restart")
FAULTS_FILE = "faults.jsonl"
ROOT = Path(__file__).resolve().parents[2]
LEASE_PATH = "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases/kalena-scheduler"
DEFAULT_FOR_S = {"engine-stop": 10.0, "db-restart": 5.0}
#: what a fault waits for recovery at most, after its own downtime (the machine is shared)
RECOVERY_TIMEOUT_S = 240.0


class Unrecovered(Exception):
    """Raised inside a fault's wait: what did not come back."""


def _refuse(problem: str, field: str, accepted: str, state_dir: Path) -> LabError:
    return LabError(problem, source=str(Path(state_dir) / "lab.json"), field=field, accepted=accepted)


def check_fault(state: dict[str, Any], state_dir: Path, kind: str, node: str | None,
                for_s: float | None) -> dict[str, Any] | None:
    """The node record the fault acts on (``None`` for lab-wide kinds), or refuse.

    Raises:
        LabError: unknown kind, unknown node, a negative ``for_s``, or a kind this lab cannot take.
    """
    if kind not in KINDS:
        raise _refuse(f"unknown fault kind {kind!r}", "KIND", ", ".join(KINDS), state_dir)
    if for_s is not None and not (for_s >= 0 and for_s == for_s):
        raise _refuse(f"--for {for_s} is not a duration", "--for", "seconds ≥ 0", state_dir)
    names = [r["name"] for r in state["nodes"]]
    if node is not None and node not in names:
        raise _refuse(f"unknown node {node!r}", "--node", ", ".join(names), state_dir)
    if kind == "db-restart" and not _postgres_database(state):
        where = (state.get("console", {}).get("env") or {}).get("KALENA_DB_PATH") or \
            (state.get("database") or {}).get("url") or "a SQLite file"
        raise _refuse(f"the lab's database is a SQLite file inside the console's process ({where}): no database "
                      "server to restart", "KIND", "a Kubernetes-mode lab with a PostgreSQL --database-url", state_dir)
    if kind in ("agent-restart", "engine-stop"):
        return next(r for r in state["nodes"] if r["name"] == (node or names[0]))
    return None


def _postgres_database(state: dict[str, Any]) -> bool:
    db = state.get("database") or {}
    return bool(db.get("created")) and str(db.get("url", "")).startswith(("postgres://", "postgresql://"))


def run_fault(state_dir: Path, kind: str, *, node: str | None = None, for_s: float | None = None,
              timeout_s: float = RECOVERY_TIMEOUT_S, say: Callable[[str], None] = print) -> dict[str, Any]:
    """Inject ``kind`` (module doc) into the lab recorded in ``state_dir``, wait for recovery
    (at most ``for_s`` + ``timeout_s`` seconds), append the record to ``faults.jsonl`` and
    return it.

    Raises:
        LabError: no lab recorded there, or bad input (:func:`check_fault`): nothing was changed.
    """
    state_dir, state = recorded(state_dir, "fault")
    record = check_fault(state, state_dir, kind, node, for_s)
    down_s = DEFAULT_FOR_S.get(kind, 0.0) if for_s is None else float(for_s)
    started = time.time()
    out: dict[str, Any] = {"kind": kind, "node": record["name"] if record else None, "started_at": started,
                           "ended_at": None, "recovered": False, "detail": ""}
    try:
        if kind == "agent-restart":
            detail = _agent_restart(state_dir, state, record, timeout_s)
        elif kind == "engine-stop":
            detail = _engine_stop(state_dir, state, record, down_s, timeout_s)
        elif kind == "leader-kill":
            detail = _leader_kill(state_dir, state, timeout_s)
        else:
            detail = _db_restart(state, down_s, timeout_s)
        out.update(recovered=True, detail=detail)
    except Unrecovered as exc:
        out.update(recovered=False, detail=f"not recovered: {exc}")
    out["ended_at"] = time.time()
    with open(state_dir / FAULTS_FILE, "a", encoding="utf-8") as f:
        f.write(json.dumps(out, sort_keys=True) + "\n")
    return out


# -- helpers ---------------------------------------------------------------------------------------

def _kill9(ref: dict[str, int] | None) -> None:
    if alive(ref):
        try:
            os.kill(int(ref["pid"]), signal.SIGKILL)  # type: ignore[index]
        except ProcessLookupError:
            pass
    _until(lambda: not alive(ref), 30.0, "the killed process to be gone")


def _until(predicate: Callable[[], Any], timeout_s: float, what: str, every_s: float = 0.25) -> Any:
    end = time.monotonic() + timeout_s
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > end:
            raise Unrecovered(what)
        time.sleep(every_s)


def _update_node(state_dir: Path, name: str, **fields: Any) -> None:
    """Write fields of one node's record, re-reading ``lab.json`` first (others write it too)."""
    state = state_read(state_dir)
    if state is None:
        raise Unrecovered("the lab's record vanished (`down` ran meanwhile?)")
    for r in state["nodes"]:
        if r["name"] == name:
            r.update(fields)
    state_write(state_dir, state)


def _popen(argv: list[str], env: dict[str, str], log: str | Path, cwd: Path = ROOT, *,
           preexec_fn: Callable[[], None] | None = None) -> subprocess.Popen:
    with open(log, "ab") as out:
        return subprocess.Popen(argv, env=env, cwd=cwd, stdout=out, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True, preexec_fn=preexec_fn)


def _agent_linked(record: dict[str, Any]) -> bool:
    if not alive(record.get("agent")):
        return False
    body = agent_health(record)
    if not body or body.get("status") != "ok":
        return False
    link = body.get("link") or {}
    return bool(link.get("connected")) or not link.get("configured")


def _agent_env(state: dict[str, Any], record: dict[str, Any]) -> dict[str, str]:
    if record.get("agent_env"):
        return dict(record["agent_env"])
    # Docker mode's up started the agents with its own environment, less the console's database
    return {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "REDIS_URL")}


def _agent_argv(state: dict[str, Any], record: dict[str, Any]) -> list[str]:
    if record.get("agent_argv"):
        return list(record["agent_argv"])
    node = NodePlan(name=record["name"], address=record["address"], cpu_mcpu=record["cpu_mcpu"],
                    memory_bytes=record["memory_bytes"], cgroup=record["cgroup"])
    directory = Path(record["directory"])
    return machinery.agent_argv(node, directory=directory, link_url=state["console"]["link_url"],
                                token_file=directory / "agent.token",
                                sampling_interval_s=float(state.get("sampling_interval_s", 2.0)))


def _start_agent(state_dir: Path, state: dict[str, Any], record: dict[str, Any]) -> dict[str, int]:
    """Start the node's agent again with its recorded flags; in Kubernetes mode inside its
    DaemonSet pod's cgroup, as ``up`` started it (the pod's group looked up again)."""
    log = Path(state["logs"]) / f"agent-{record['name']}.log"
    enter = None
    if record.get("agent_cgroup"):
        from agents.lab.kubernetes import agent_pod_group
        enter = machinery.cgroup_entry(agent_pod_group(state["apiserver"]["url"], record))
    proc = _popen(_agent_argv(state, record), _agent_env(state, record), log, preexec_fn=enter)
    ref = process_ref(proc.pid)
    record["agent"] = ref
    _update_node(state_dir, record["name"], agent=ref)
    return ref


# -- the kinds -------------------------------------------------------------------------------------

def _agent_restart(state_dir: Path, state: dict[str, Any], record: dict[str, Any], timeout_s: float) -> str:
    old = record.get("agent")
    t0 = time.monotonic()
    _kill9(old)
    ref = _start_agent(state_dir, state, record)
    _until(lambda: _agent_linked(record), timeout_s, f"the agent of {record['name']} (pid {ref['pid']}): /healthz "
           "ok and linked to the console")
    return (f"agent of {record['name']} pid {(old or {}).get('pid')} killed (SIGKILL), restarted as pid {ref['pid']}; "
            f"healthy and linked {time.monotonic() - t0:.1f} s after the kill")


def _engine_answers(record: dict[str, Any]) -> bool:
    try:
        client = machinery.engine_client(f"unix://{record['socket']}", timeout_s=5)
        try:
            return bool(client.ping())
        finally:
            client.close()
    except Exception:  # noqa: BLE001 - not answering yet
        return False


def _node_ready_since(state: dict[str, Any], name: str, since_s: float) -> bool:
    """The Node's ``Ready`` condition is True with a heartbeat at or after ``since_s``."""
    from datetime import datetime

    try:
        with urllib.request.urlopen(f"{state['apiserver']['url']}/api/v1/nodes/{name}", timeout=5) as r:  # noqa: S310
            node = json.loads(r.read())
    except (OSError, ValueError):
        return False
    for c in (node.get("status") or {}).get("conditions") or []:
        if c.get("type") == "Ready" and c.get("status") == "True":
            beat = c.get("lastHeartbeatTime") or ""
            try:
                return datetime.fromisoformat(beat.replace("Z", "+00:00")).timestamp() >= since_s - 1.0
            except ValueError:
                return False
    return False


def _engine_stop(state_dir: Path, state: dict[str, Any], record: dict[str, Any], down_s: float,
                 timeout_s: float) -> str:
    from agents.lab.state import stop

    old = record.get("engine")
    running = 0
    if _engine_answers(record):
        try:
            client = machinery.engine_client(f"unix://{record['socket']}", timeout_s=10)
            running = len(client.containers.list(ignore_removed=True))
            client.close()
        except Exception:  # noqa: BLE001 - counted as unknown
            running = -1
    if not stop(old, timeout_s=30.0):
        raise Unrecovered(f"the engine of {record['name']} (pid {(old or {}).get('pid')}) did not stop")
    stopped = time.monotonic()
    for pid in machinery.shims_of(record["containerd_namespace"]):  # a shim the engine left: its container
        _kill9(process_ref(pid))
    time.sleep(max(0.0, down_s - (time.monotonic() - stopped)))
    node = NodePlan(name=record["name"], address=record["address"], cpu_mcpu=record["cpu_mcpu"],
                    memory_bytes=record["memory_bytes"], cgroup=record["cgroup"])
    restarted_s, restart_mono = time.time(), time.monotonic()
    proc = machinery.engine_launch(node, Path(record["directory"]))
    ref = process_ref(proc.pid)
    record["engine"] = ref
    _update_node(state_dir, record["name"], engine=ref)
    _until(lambda: _engine_answers(record), timeout_s, f"the engine of {record['name']} (pid {ref['pid']}) to answer")
    waited = ["engine answers"]
    if record.get("kubelet"):
        _until(lambda: kubelet_health(record) == "ok", timeout_s, f"the kubelet double of {record['name']} to answer")
        _until(lambda: _node_ready_since(state, record["name"], restarted_s), timeout_s,
               f"Node {record['name']} Ready with a heartbeat after the engine's restart", every_s=1.0)
        waited.append(f"Node {record['name']} Ready")
    _until(lambda: _agent_linked(record), timeout_s, f"the agent of {record['name']} healthy and linked")
    waited.append("agent healthy and linked")
    back = time.monotonic()
    return (f"engine of {record['name']} pid {(old or {}).get('pid')} stopped (SIGTERM; {running} container(s) "
            f"were running), down {restart_mono - stopped:.1f} s, restarted as pid {ref['pid']} with the same "
            f"flags; {', '.join(waited)} {back - restart_mono:.1f} s after the restart")


def _lease(state: dict[str, Any]) -> dict[str, Any]:
    try:
        with urllib.request.urlopen(state["apiserver"]["url"] + LEASE_PATH, timeout=5) as r:  # noqa: S310 - loopback
            return (json.loads(r.read()).get("spec")) or {}
    except (OSError, ValueError):
        return {}


def _process_record(state: dict[str, Any], name: str) -> dict[str, Any]:
    return next(r for r in state.get("processes", []) if r["name"] == name)


def _restart_process(state_dir: Path, name: str) -> dict[str, int]:
    """Start the control-plane process ``name`` again as ``up`` did (its argv, env and log)."""
    state = state_read(state_dir)
    if state is None:
        raise Unrecovered("the lab's record vanished (`down` ran meanwhile?)")
    record = _process_record(state, name)
    proc = _popen(record["argv"], record["env"], record["log"])
    record["process"] = process_ref(proc.pid)
    state_write(state_dir, state)
    return record["process"]


def _probe_passes(record: dict[str, Any], which: str = "readiness") -> bool:
    from agents.lab.kubernetes import probe_once
    from agents.lab.manifests import Probe

    spec = (record.get("probes") or {}).get(which) or (record.get("probes") or {}).get("startup")
    if spec is None:
        return alive(record.get("process"))
    spec = dict(spec)
    spec["argv"] = tuple(spec.get("argv") or ())
    return alive(record.get("process")) and probe_once(Probe(**spec), record.get("env") or {})[0]


def _leader_kill(state_dir: Path, state: dict[str, Any], timeout_s: float) -> str:
    if state.get("orchestrator") != "kubernetes":
        return _console_kill(state_dir, state, timeout_s)
    lease = _lease(state)
    holder = str(lease.get("holderIdentity") or "")
    if not holder:
        raise LabError("no scheduler holds the Lease kube-system/kalena-scheduler now", source=state["apiserver"]["url"],
                       field="leader-kill", accepted="a lab whose scheduler leads (wait for it after `up`)")
    pid = holder.rsplit("-", 1)[-1]
    candidates = [r for r in state.get("processes", []) if str((r.get("process") or {}).get("pid")) == pid]
    if not candidates:
        raise LabError(f"the Lease holder {holder!r} is none of the lab's processes", source=state["apiserver"]["url"],
                       field="leader-kill", accepted="a Lease held by the lab's scheduler")
    victim = candidates[0]
    t0 = time.monotonic()
    killed_s = time.time()
    _kill9(victim["process"])
    ref = _restart_process(state_dir, victim["name"])
    restarted = _process_record(state_read(state_dir) or state, victim["name"])

    def new_holder() -> str | None:
        spec = _lease(state)
        h = str(spec.get("holderIdentity") or "")
        return h if h and h != holder else None

    took = _until(new_holder, timeout_s + float(lease.get("leaseDurationSeconds") or 15), "a new Lease holder",
                  every_s=0.5)
    _until(lambda: _probe_passes(restarted), timeout_s, f"{victim['name']} (pid {ref['pid']}) ready")
    return (f"Lease holder {holder} ({victim['name']} pid {victim['process']['pid']}) killed (SIGKILL); the lab runs "
            f"one scheduler, so it was started again as up started it (pid {ref['pid']}); new holder {took} "
            f"{time.monotonic() - t0:.1f} s after the kill (the dead holder's lease of "
            f"{lease.get('leaseDurationSeconds')} s had to expire first; killed at {killed_s:.1f})")


def _console_answers(state: dict[str, Any]) -> bool:
    try:
        with urllib.request.urlopen(state["console"]["url"] + "livez", timeout=5) as r:  # noqa: S310 - loopback
            return 200 <= r.status < 400
    except urllib.error.HTTPError:
        return False
    except OSError:
        return False


def _console_kill(state_dir: Path, state: dict[str, Any], timeout_s: float) -> str:
    """Docker/Swarm mode: the scheduling loops live in the console's process."""
    console = state["console"]
    old = console.get("process")
    t0 = time.monotonic()
    _kill9(old)
    argv = [sys.executable, "-m", "kalena_web.cli", "serve", "--host", console["address"], "--port",
            str(console["port"]), "--cluster", state["name"]]
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "REDIS_URL", "DATABASE_URL_FILE",
                                                           "REDIS_URL_FILE")}
    env.update(console.get("env") or {}, DJANGO_SETTINGS_MODULE="kalena_web.settings")
    proc = _popen(argv, env, console["log"])
    fresh = state_read(state_dir) or state
    fresh["console"]["process"] = process_ref(proc.pid)
    state_write(state_dir, fresh)
    _until(lambda: _console_answers(state), timeout_s, f"the console (pid {proc.pid}) to answer /livez")
    for record in fresh["nodes"]:
        _until(lambda r=record: _agent_linked(r), timeout_s, f"the agent of {record['name']} linked again")
    return (f"Docker-mode lab: no Lease — the scheduling loops run in the console, so the console pid "
            f"{(old or {}).get('pid')} was killed (SIGKILL) and started again as up started it (pid {proc.pid}); "
            f"answering, every agent linked again {time.monotonic() - t0:.1f} s after the kill")


def _db_restart(state: dict[str, Any], down_s: float, timeout_s: float) -> str:
    import psycopg

    db = state["database"]
    name = db["created"]
    admin = db["url"].rsplit("/", 1)[0] + "/postgres"
    t0 = time.monotonic()
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'ALTER DATABASE "{name}" WITH ALLOW_CONNECTIONS false')
        try:
            killed = conn.execute("SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE datname = %s "
                                  "AND pid <> pg_backend_pid()", (name,)).fetchone()[0]
            time.sleep(down_s)
        finally:
            conn.execute(f'ALTER DATABASE "{name}" WITH ALLOW_CONNECTIONS true')
    reopened = time.monotonic()
    for record in state.get("processes", []):
        if record.get("process") is None:       # a Job run to completion, or a finished play
            continue
        if not alive(record["process"]):
            raise Unrecovered(f"{record['name']} (pid {record['process']['pid']}) exited")
        _until(lambda r=record: _probe_passes(r), timeout_s, f"{record['name']} ready again", every_s=1.0)
    return (f"database {name}: {killed} connection(s) terminated, connections refused for {down_s:g} s, then "
            f"accepted; every control-plane process alive and ready {time.monotonic() - reopened:.1f} s later "
            f"({time.monotonic() - t0:.1f} s after the fault)")
