"""``kalena bench faults``: ingest and estimation under faults, reconciled against an
independent log of every generated sample (loopback only; prints figures, not a timed test).

Setup: a private PostgreSQL cluster and a private Redis (:mod:`kalena_web.cli.faultenv`, never
the machine's shared ones), Daphne (``kalena serve``), ``--workers`` Celery workers (2) and
Celery beat as child processes with production settings, the irina-186-3d cluster replicated to
``--agents`` nodes, and one real :class:`~agents.link.client.LinkClient` per node with its own
on-disk :class:`~agents.link.buffer.LinkBuffer` (default timeouts and backoff). A generator
thread gives every agent, every ``T = pods / rate`` seconds, one sample per workload on its
node and writes each sample to ``generated.jsonl`` — the ground truth: an agent's buffer is
not, once its state file is lost.

Each fault is one row, run in turn on the same services: generate ``--warmup-s``, inject the
fault (the row's clock ``fault_end`` starts when the fault is over: the database or Redis
answers again, Daphne listens again, the trigger is dropped, the buffers replaced), keep
generating until every sample generated up to ``fault_end`` is stored exactly once
(``recovery_s``: as many rows as samples, no two alike) and applied by estimation
(``applied_s``; both at most 90 s), stop generating, wait until every buffer is empty and no
batch is pending, then reconcile:

* ``samples_sent`` — samples generated during the row (the log);
* ``samples_stored`` — of those, how many are in the database (``(node, workload, ts)``);
* ``samples_lost`` — sent − stored;
* ``double_applied`` — stored rows beyond the first per sample, plus samples estimation
  applied more than once (Σ ``EstimationRun.samples`` − samples of applied batches, this row);
* ``reservations_mismatched`` — workloads whose stored reservation differs (rtol 1e-9) from a
  re-fold of every stored sample since the start with the engine's ``apply_samples``.

and why the recovery took what it took: ``reconnect_s`` (every agent connected again),
``backlog_samples`` (generated up to ``fault_end``, not stored at ``fault_end``),
``arrival_per_s`` and ``drain_per_s`` (samples generated, and stored, per second from
``fault_end`` to ``recovery_s``; the backlog shrinks at their difference — null when there was
under a second of backlog), ``samples_per_write`` (group commits meanwhile), ``cores`` (CPU
used meanwhile by Daphne, the workers and this process's agents), ``machine_busy_pct`` and
``load_1m``. The floor: 0 lost, 0 double, 0 mismatched, ``recovery_s`` and ``applied_s`` ≤ 30.

The ``worker-kill`` row also measures how soon the control loops resume (docs/design.md §12): it kills
the workers while one of them is inside a scheduling pass (its lock ``scheduling:<cluster>``
held in Redis; it waits up to 30 s for that), lists the loop locks held at that moment
(``locks_held_at_kill``) and reports ``loop_gap_s``: for scheduling, escalation and the
batch-capacity publisher, seconds from the kill to the start of the loop's next completed run
(:class:`~kalena_web.control.models.LoopRun`; null if none came within 60 s, or for the
publisher when the workers' ``KALENA_ORCHESTRATOR`` is not ``kubernetes``, where it does not
run). The gap is the new workers' start-up, the dead holder's lock running out
(``KALENA_LOOP_LOCK_TTL_S``) and the wait for the loop's next beat tick (5 s, 15 s, 5 s).
"""

from __future__ import annotations

import argparse
import heapq
import json
import os
import random
import shutil
import signal
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

FAULTS = ("worker-kill", "redis-restart", "redis-down-20s", "redis-freeze-20s", "postgres-restart",
          "postgres-down-20s", "daphne-kill", "daphne-down-20s", "write-failure", "oversize-batch",
          "buffer-state-lost")
SHORT_FAULTS = ("worker-kill", "postgres-restart", "daphne-kill", "write-failure", "oversize-batch",
                "buffer-state-lost")
RECOVERY_LIMIT_S = 90.0
FLOOR_RECOVERY_S = 30.0
#: the loops whose resumption the worker-kill row measures (LoopRun.loop)
RESUMED_LOOPS = ("scheduling", "escalation", "publish")
LOOP_GAP_LIMIT_S = 60.0


def add_parsers(which: argparse._SubParsersAction) -> None:
    faults = which.add_parser("faults", help="ingest and estimation under faults, reconciled against a generated log",
                              description=__doc__.split("\n\n")[1])
    faults.add_argument("--agents", type=int, default=150, help="link clients = nodes (150)")
    faults.add_argument("--rate", type=float, default=1500.0, help="samples/s across all agents (1500)")
    faults.add_argument("--warmup-s", type=float, default=10.0, help="generation before each fault (10)")
    faults.add_argument("--outage-s", type=float, default=20.0, help="length of the *-down-20s / freeze faults (20)")
    faults.add_argument("--write-failure-s", type=float, default=10.0, help="how long every write fails (10)")
    faults.add_argument("--workers", type=int, default=2,
                        help="Celery worker processes (2: the periodic loops — archive rollups take tens of seconds "
                             "at this size — do not hold estimation up)")
    faults.add_argument("--faults", nargs="+", choices=FAULTS, help="rows to run (default: all eleven)")
    faults.add_argument("--short", action="store_true",
                        help=f"CI size: 12 agents, 120 samples/s, 4 s warm-up, rows {', '.join(SHORT_FAULTS)}")
    faults.add_argument("--pg-port", type=int, default=23432, help="private PostgreSQL port (23432)")
    faults.add_argument("--redis-port", type=int, default=23379, help="private Redis port (23379)")
    faults.add_argument("--daphne-port", type=int, default=23800, help="Daphne port (23800)")
    faults.add_argument("--state-dir", type=Path, default=Path("var/bench-faults"),
                        help="logs, agent buffers and generated.jsonl (var/bench-faults, emptied first)")
    faults.add_argument("--keep", action="store_true", help="keep the private PostgreSQL cluster afterwards")
    faults.add_argument("--summary-json", type=Path, help="also write the figures to this JSON file")
    faults.set_defaults(handler=handle)


# --- the agents and the generated log --------------------------------------------------------

@dataclass(eq=False)
class BenchAgent:
    """One node's real link client and buffer; ``hold`` pauses its generation."""

    node: object  # bench_agents.SimNode
    directory: Path
    url: str
    interval_s: float
    buffer: object = None
    client: object = None
    hold: bool = False
    last_ts: float = 0.0
    oversize_rounds: int = 0

    @property
    def buffer_path(self) -> Path:
        return self.directory / "link-buffer.sqlite3"

    def start(self) -> None:
        import numpy as np

        from agents.link import protocol
        from agents.link.buffer import LinkBuffer
        from agents.link.client import LinkClient

        self.directory.mkdir(parents=True, exist_ok=True)
        self.buffer = LinkBuffer(self.buffer_path, node=self.node.name)
        capacity = np.array([np.nan if c is None else c for c in self.node.capacity], dtype=float)

        def hello() -> dict:
            return protocol.hello_message(node=self.node.name, agent_version="bench-faults",
                                          sampling_interval_s=self.interval_s, cgroup_version=2,
                                          signal_sources={"cpu": ["poll"]}, trigger_window_s=2.0, capacity=capacity,
                                          buffered=self.buffer.count(), ts=time.time())

        self.client = LinkClient(self.url, self.node.token, self.buffer, hello=hello)
        self.buffer.on_append = self.client.notify
        self.client.start()

    def stop(self) -> None:
        self.client.stop()
        self.buffer.close()

    def lose_state_file(self) -> None:
        """The agent restarts without its buffer file (deleted, disk replaced)."""
        self.stop()
        for leftover in self.directory.glob("link-buffer.sqlite3*"):
            leftover.unlink()
        self.start()


def _vector(values) -> dict:
    from agents.link.protocol import USAGE_KEYS

    return {k: (None if v is None else float(v)) for k, v in zip(USAGE_KEYS, values)}


class Generator:
    """Samples for every agent on its schedule, each written to the independent log first."""

    def __init__(self, agents: list[BenchAgent], *, interval_s: float, log_path: Path, seed: int = 0) -> None:
        self.agents, self.interval_s = agents, interval_s
        self.rng = random.Random(seed)
        self.row = -1                      # < 0: generating nothing
        self.keys: dict[int, list[tuple[int, int, float]]] = {}
        self._log = log_path.open("a")
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="bench-faults-generator", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(30)
        self._log.close()

    def generated(self, row: int, *, until_ts: float = float("inf")) -> int:
        with self._lock:
            return sum(1 for k in self.keys.get(row, ()) if k[2] <= until_ts)

    def _message(self, agent: BenchAgent) -> tuple[dict, list[tuple[int, int, float]]]:
        rounds = max(1, agent.oversize_rounds)
        agent.oversize_rounds = 0
        base = max(time.time(), agent.last_ts + 0.001)
        records, keys = [], []
        for r in range(rounds):
            ts = round(base + 0.001 * r, 6)
            for w in agent.node.workloads:
                f = self.rng.uniform(0.2, 0.6)
                usage = [w.request[0] * f, w.request[1] * f, None, None, *(v * f for v in w.request[4:8])]
                records.append({"workload": w.name, "name": w.name.rsplit("/", 1)[-1], "kind": "kubernetes",
                                "tier": "service", "priority": 0, "ts": ts, "stale": False, "usage": _vector(usage),
                                "request": _vector(w.request), "limit": _vector(w.request),
                                "reservation": _vector(w.request), "memory_usage_bytes": None,
                                "cpu_throttling": None, "psi": None})
                keys.append((agent.node.id, w.id, ts))
            agent.last_ts = ts
        message = {"type": "samples", "v": 1, "node": agent.node.name, "ts": agent.last_ts,
                   "interval_s": self.interval_s, "node_sample": {"ts": agent.last_ts, "working_set_bytes": None,
                                                                  "psi": None}, "samples": records}
        return message, keys

    def _run(self) -> None:
        start = time.time()
        due = [(start + self.interval_s * i / len(self.agents), i) for i in range(len(self.agents))]
        heapq.heapify(due)
        while not self._stop.is_set():
            at, i = heapq.heappop(due)
            heapq.heappush(due, (at + self.interval_s, i))
            if self._stop.wait(max(0.0, at - time.time())):
                return
            agent, row = self.agents[i], self.row
            if row < 0 or agent.hold:
                continue
            message, keys = self._message(agent)
            with self._lock:                                   # the log first, then the agent's buffer
                self.keys.setdefault(row, []).extend(keys)
                self._log.write(json.dumps({"row": row, "node": agent.node.id,
                                            "samples": [[k[1], k[2]] for k in keys]}) + "\n")
            self._log.flush()
            agent.buffer.append(message)


# --- reading the private database (a new connection each time: it may be restarting) ----------

def _query(url: str, sql: str, params: tuple = ()) -> list[tuple] | None:
    import psycopg

    try:
        with psycopg.connect(url, connect_timeout=3, autocommit=True) as conn:
            return conn.execute(sql, params).fetchall()
    except psycopg.Error:
        return None


def _over_applied(url: str) -> int:
    rows = _query(url, "SELECT (SELECT COALESCE(sum(samples), 0) FROM ledger_estimationrun) - (SELECT count(*) FROM "
                       "telemetry_sample s JOIN telemetry_ingestbatch b ON b.id = s.batch_id WHERE b.estimation_run > 0)")
    return int(rows[0][0]) if rows else 0


def _drained(url: str, agents: list[BenchAgent]) -> bool:
    if any(a.buffer.count() for a in agents):
        return False
    rows = _query(url, "SELECT count(*) FROM telemetry_ingestbatch WHERE estimation_run IS NULL")
    return rows is not None and rows[0][0] == 0


def _initial_workloads(node_ids: list[int]):
    from kalena_web.ledger import estimation_io, mappers
    from kalena_web.ledger.estimation import live_policy

    return mappers.live_workloads(estimation_io.load_workloads(node_ids),
                                  limit_ratio=live_policy().estimator.limit_ratio)


def _mismatched_reservations(initial, node_ids: list[int]) -> int:
    """Workloads whose stored reservation is not the engine's fold of every stored sample from
    the reservations at the start (``initial``)."""
    import numpy as np
    from django.db import connection

    from kalena_engine.estimator import apply_samples, pinned_mask
    from kalena_web.ledger import mappers
    from kalena_web.ledger.estimation import live_policy
    from kalena_web.telemetry.models import USAGE_COLUMNS

    connection.close()                                          # the server may have restarted since
    policy = live_policy().estimator
    now = _initial_workloads(node_ids)
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT s.id, s.workload_id, s.node_id, s.ts, {', '.join('s.' + c for c in USAGE_COLUMNS)} "
                       "FROM telemetry_sample s JOIN telemetry_ingestbatch b ON b.id = s.batch_id "
                       "WHERE b.estimation_run > 0")
        samples = mappers.sample_arrays(cursor.fetchall())
    kept, rows, unmeasured = mappers.estimator_inputs(initial, samples)
    state, _ = apply_samples(
        initial.state, workload=rows, time_s=samples.ts[kept], usage=np.nan_to_num(samples.usage[kept], nan=0.0),
        request=initial.request, limit=initial.limit, start_s=initial.start_s,
        grace_s=np.full(len(initial), policy.grace_s), pinned=pinned_mask(initial.reclaim_disabled), policy=policy,
        unmeasured=unmeasured)
    where = {int(w): i for i, w in enumerate(now.ids)}
    return sum(1 for i, w in enumerate(initial.ids)
               if not np.allclose(state.value[i], now.state.value[where[int(w)]], rtol=1e-9, atol=1e-6))


def _reconcile(url: str, generator: Generator, row: int) -> dict:
    with generator._lock:
        keys = list(generator.keys.get(row, ()))
    if not keys:
        return {"samples_sent": 0, "samples_stored": 0, "samples_lost": 0, "duplicate_rows": 0}
    t0, t1 = min(k[2] for k in keys), max(k[2] for k in keys)
    rows = _query(url, "SELECT node_id, workload_id, ts, count(*) FROM telemetry_sample WHERE ts >= %s AND ts <= %s "
                       "GROUP BY 1, 2, 3", (t0, t1)) or []
    stored = {(n, w, ts): c for n, w, ts, c in rows}
    found = sum(1 for k in keys if k in stored)
    return {"samples_sent": len(keys), "samples_stored": found, "samples_lost": len(keys) - found,
            "duplicate_rows": sum(c - 1 for c in stored.values() if c > 1)}


# --- the faults --------------------------------------------------------------------------------

@dataclass
class Rig:
    """Everything a fault acts on."""

    args: argparse.Namespace
    pg: object        # faultenv.PrivatePostgres
    redis: object     # faultenv.PrivateRedis
    procs: object     # benchenv.Processes
    agents: list[BenchAgent]
    generations: dict[str, int] = field(default_factory=lambda: {"daphne": 0, "workers": 0})
    killed: dict | None = None        # worker-kill: {"at_s": …, "held": [loop, …]}

    def name(self, kind: str) -> str:
        return f"{kind}-{self.generations[kind]}"

    def worker_names(self) -> list[str]:
        return [f"worker-{self.generations['workers']}-{i}" for i in range(self.args.workers)]

    def start_daphne(self) -> None:
        self.generations["daphne"] += 1
        self.procs.daphne(self.args.daphne_port, name=self.name("daphne"))

    def start_workers(self) -> None:
        self.generations["workers"] += 1
        for name in self.worker_names():
            self.procs.worker(name)


WRITE_FAILURE_SQL = """
CREATE OR REPLACE FUNCTION kalena_bench_write_failure() RETURNS trigger AS $$
BEGIN RAISE EXCEPTION 'kalena bench faults: injected write failure'; END $$ LANGUAGE plpgsql;
CREATE TRIGGER kalena_bench_write_failure BEFORE INSERT ON telemetry_ingestbatch
FOR EACH STATEMENT EXECUTE FUNCTION kalena_bench_write_failure();
"""


def inject(fault: str, rig: Rig) -> None:
    """Run ``fault`` on the rig; returns once it is over (the service is back)."""
    import psycopg

    outage = rig.args.outage_s
    if fault == "worker-kill":
        held = _mid_pass(rig.redis.url)
        rig.killed = {"at_s": time.time(), "held": held}
        for name in rig.worker_names():                      # every worker: no survivor takes over
            rig.procs.stop(name, sig=signal.SIGKILL)
        rig.start_workers()                                  # as a supervisor restarts them
    elif fault == "redis-restart":
        rig.redis.stop()
        rig.redis.start()
    elif fault == "redis-down-20s":
        rig.redis.stop()
        time.sleep(outage)
        rig.redis.start()
    elif fault == "redis-freeze-20s":
        rig.redis.freeze()
        time.sleep(outage)
        rig.redis.thaw()
    elif fault == "postgres-restart":
        rig.pg.restart()
    elif fault == "postgres-down-20s":
        rig.pg.stop()
        time.sleep(outage)
        rig.pg.start()
    elif fault == "daphne-kill":
        rig.procs.stop(rig.name("daphne"), sig=signal.SIGKILL)
        rig.start_daphne()
    elif fault == "daphne-down-20s":
        rig.procs.stop(rig.name("daphne"))
        time.sleep(outage)
        rig.start_daphne()
    elif fault == "write-failure":
        with psycopg.connect(rig.pg.url, autocommit=True) as conn:
            conn.execute(WRITE_FAILURE_SQL)
            time.sleep(rig.args.write_failure_s)
            conn.execute("DROP TRIGGER kalena_bench_write_failure ON telemetry_ingestbatch")
    elif fault == "oversize-batch":
        victims = rig.agents[:3]
        for agent in victims:                                # > 2,000 samples and > 1 MiB in one batch
            agent.oversize_rounds = max(2, 2600 // max(1, len(agent.node.workloads)))
        while any(a.oversize_rounds for a in victims):
            time.sleep(0.05)
    elif fault == "buffer-state-lost":
        for agent in rig.agents[:max(3, len(rig.agents) // 10)]:
            agent.hold = True
            end = time.monotonic() + 60
            while agent.buffer.count() and time.monotonic() < end:   # what it sent is acknowledged …
                time.sleep(0.05)
            agent.lose_state_file()                              # … then its state file is gone
            agent.hold = False
    else:
        raise ValueError(f"unknown fault {fault!r}")


def _mid_pass(redis_url: str, *, wait_s: float = 30.0) -> list[str]:
    """Wait (at most ``wait_s``) until a scheduling pass holds its lock; returns the loops whose
    per-cluster locks are held at that moment (``kalena:lock:<loop>:<cluster id>``)."""
    import redis

    client = redis.Redis.from_url(redis_url, socket_timeout=2)
    end = time.monotonic() + wait_s
    while time.monotonic() < end and not client.keys("kalena:lock:scheduling:*"):
        time.sleep(0.002)
    return sorted({key.decode().split(":")[2] for key in client.keys("kalena:lock:*:*")
                   if key.decode().split(":")[2] != "estimation"})


def _loop_gaps(url: str, killed_at_s: float) -> dict[str, float | None]:
    """Seconds from the kill to the start of each loop's next completed run (null: none within
    :data:`LOOP_GAP_LIMIT_S`; the publisher: none at all unless the workers run Kubernetes)."""
    from django.conf import settings

    wanted = [loop for loop in RESUMED_LOOPS if loop != "publish" or settings.KALENA_ORCHESTRATOR == "kubernetes"]
    gaps: dict[str, float | None] = dict.fromkeys(RESUMED_LOOPS)
    while time.time() < killed_at_s + LOOP_GAP_LIMIT_S:
        rows = _query(url, "SELECT loop, min(started_s) FROM control_looprun WHERE outcome = 'done' AND started_s >= %s "
                           "GROUP BY loop", (killed_at_s,)) or []
        for loop, started in rows:
            if loop in gaps:
                gaps[loop] = round(started - killed_at_s, 1)
        if all(gaps[loop] is not None for loop in wanted):
            break
        time.sleep(0.5)
    return gaps


@dataclass
class Progress:
    """One look at the database during a row's recovery: of the samples stamped up to the end
    of the fault, the rows stored, the distinct samples stored and those applied by estimation;
    and every sample of the row stored so far (whatever its stamp)."""

    rows: int
    distinct: int
    applied: int
    stored_all: int


def _progress(url: str, row_start: float, fault_end: float) -> Progress | None:
    rows = _query(url, "SELECT count(*) FILTER (WHERE s.ts <= %s), "
                       "count(DISTINCT (s.node_id, s.workload_id, s.ts)) FILTER (WHERE s.ts <= %s), "
                       "count(*) FILTER (WHERE s.ts <= %s AND b.estimation_run IS NOT NULL), count(*) "
                       "FROM telemetry_sample s JOIN telemetry_ingestbatch b ON b.id = s.batch_id WHERE s.ts >= %s",
                  (fault_end, fault_end, fault_end, row_start))
    return None if rows is None else Progress(*rows[0])


def _writes_between(url: str, t0: float, t1: float) -> tuple[int, int]:
    """``(group commits, samples)`` stored between ``t0`` and ``t1`` (a write's batches share
    its ``stored_s``)."""
    rows = _query(url, "SELECT count(DISTINCT stored_s), COALESCE(sum(samples), 0) FROM telemetry_ingestbatch "
                       "WHERE stored_s >= %s AND stored_s <= %s", (t0, t1))
    return (0, 0) if not rows else (int(rows[0][0]), int(rows[0][1]))


@dataclass
class Recovery:
    """What a row's recovery loop measured (seconds from the end of the fault)."""

    recovery_s: float | None = None     # every sample stamped up to the fault's end stored exactly once
    applied_s: float | None = None      # … and applied by estimation
    reconnect_s: float | None = None    # every agent connected again
    backlog_samples: int | None = None  # generated up to the fault's end and not stored at its end
    arrival_per_s: float | None = None  # samples generated per second while the backlog drained
    drain_per_s: float | None = None    # samples stored per second (backlog and new) meanwhile
    samples_per_write: float | None = None
    cores: dict[str, float] | None = None  # CPU used meanwhile: Daphne, the workers, the agents (this process)
    machine_busy_pct: float | None = None


def _recover(row: int, fault: str, rig: Rig, generator: Generator, row_start: float, fault_end: float) -> Recovery:
    """Poll the database every 0.5 s after the fault until every sample stamped up to
    ``fault_end`` is stored exactly once and applied and every agent is connected again (or
    :data:`RECOVERY_LIMIT_S`); the
    progress goes to the row's timeline file."""
    from kalena_web.cli.benchenv import machine_ticks, process_cpu_s

    url, out = rig.pg.url, Recovery()
    pids = {"daphne": [rig.procs.procs[rig.name("daphne")].pid],
            "workers": [rig.procs.procs[name].pid for name in rig.worker_names()]}

    def cpu_s() -> dict[str, float]:
        used = {k: sum(process_cpu_s(p) for p in v) for k, v in pids.items()}
        return {**used, "agents": process_cpu_s(os.getpid(), descendants=False)}

    cpu0, busy0 = cpu_s(), machine_ticks()
    first: tuple[float, Progress, int] | None = None   # the first answer after the fault: (s, progress, generated)
    last: tuple[float, int, int] | None = None
    with (rig.args.state_dir / "logs" / f"row-{row}-{fault}.timeline").open("w") as timeline:
        while (elapsed := time.time() - fault_end) < RECOVERY_LIMIT_S:
            progress = _progress(url, row_start - 1e-6, fault_end)
            wanted = generator.generated(row, until_ts=fault_end)
            generated = generator.generated(row)
            connected = sum(a.client.connected.is_set() for a in rig.agents)
            if out.reconnect_s is None and connected == len(rig.agents):
                out.reconnect_s = round(elapsed, 1)
            line = f"{elapsed:6.1f} s  wanted {wanted}  connected {connected}  "
            if progress is None:
                timeline.write(line + "database not answering\n")
            else:
                if first is None:
                    first = (elapsed, progress, generated)
                    out.backlog_samples = max(0, wanted - progress.rows)
                rates = ""
                if last is not None and elapsed > last[0]:
                    rates = (f"  stored {(progress.stored_all - last[1]) / (elapsed - last[0]):7.0f}/s"
                             f"  generated {(generated - last[2]) / (elapsed - last[0]):6.0f}/s")
                last = (elapsed, progress.stored_all, generated)
                timeline.write(line + f"stored {progress.rows} (distinct {progress.distinct})  applied "
                               f"{progress.applied}  buffered messages {sum(a.buffer.count() for a in rig.agents)}"
                               f"{rates}\n")
                if out.recovery_s is None and progress.rows == progress.distinct == wanted:
                    out.recovery_s = round(elapsed, 1)
                    span = elapsed - first[0]
                    if span >= 1.0:                       # a backlog to drain: the rates that drained it
                        out.arrival_per_s = round((generated - first[2]) / span)
                        out.drain_per_s = round((progress.stored_all - first[1].stored_all) / span)
                        writes, samples = _writes_between(url, fault_end + first[0], fault_end + elapsed)
                        out.samples_per_write = round(samples / writes) if writes else None
                        busy1, cpu1 = machine_ticks(), cpu_s()
                        out.cores = {k: round((cpu1[k] - cpu0[k]) / elapsed, 2) for k in cpu1}
                        out.machine_busy_pct = round(100 * (busy1[0] - busy0[0]) / max(1, busy1[1] - busy0[1]))
                if out.applied_s is None and progress.applied >= wanted:
                    out.applied_s = round(elapsed, 1)
            timeline.flush()
            # done when stored, applied and every agent linked again: an agent restarted by the
            # fault may still be in its reconnect backoff after the others' samples are all in
            if out.recovery_s is not None and out.applied_s is not None and out.reconnect_s is not None:
                break
            time.sleep(0.5)
    return out


def run_row(row: int, fault: str, rig: Rig, generator: Generator, initial, node_ids: list[int]) -> dict:
    url = rig.pg.url
    before_over = _over_applied(url)
    row_start = time.time()          # every sample of this row is stamped after it, every earlier one before
    generator.row = row
    time.sleep(rig.args.warmup_s)
    inject(fault, rig)
    fault_end = time.time()
    recovery = _recover(row, fault, rig, generator, row_start, fault_end)
    time.sleep(1.0)
    generator.row = -1
    end = time.monotonic() + 180
    while not _drained(url, rig.agents) and time.monotonic() < end:
        time.sleep(0.5)
    counts = _reconcile(url, generator, row)
    over = max(0, _over_applied(url) - before_over)
    gaps, held = None, None
    if fault == "worker-kill" and rig.killed is not None:
        gaps, held = _loop_gaps(url, rig.killed["at_s"]), rig.killed["held"]
    return {"fault": fault, "samples_sent": counts["samples_sent"], "samples_stored": counts["samples_stored"],
            "samples_lost": counts["samples_lost"], "double_applied": counts["duplicate_rows"] + over,
            "reservations_mismatched": _mismatched_reservations(initial, node_ids),
            "recovery_s": recovery.recovery_s, "applied_s": recovery.applied_s, "reconnect_s": recovery.reconnect_s,
            "backlog_samples": recovery.backlog_samples, "arrival_per_s": recovery.arrival_per_s,
            "drain_per_s": recovery.drain_per_s, "samples_per_write": recovery.samples_per_write,
            "cores": recovery.cores, "machine_busy_pct": recovery.machine_busy_pct,
            "load_1m": round(os.getloadavg()[0], 1), "locks_held_at_kill": held, "loop_gap_s": gaps}


def _floor_met(row: dict) -> bool:
    return (row["samples_lost"] == 0 and row["double_applied"] == 0 and row["reservations_mismatched"] == 0
            and row["samples_sent"] > 0 and all(row[k] is not None and row[k] <= FLOOR_RECOVERY_S
                                                for k in ("recovery_s", "applied_s")))


def handle(args: argparse.Namespace) -> int:
    from kalena_web.cli import benchenv, faultenv

    if args.short:
        args.agents, args.rate, args.warmup_s = min(args.agents, 12), min(args.rate, 120.0), min(args.warmup_s, 4.0)
        args.write_failure_s = min(args.write_failure_s, 5.0)
        args.faults = args.faults or list(SHORT_FAULTS)
    faults = args.faults or list(FAULTS)
    state = args.state_dir
    shutil.rmtree(state, ignore_errors=True)
    (state / "logs").mkdir(parents=True)
    print(f"bench faults: {args.agents} agents, {args.rate:g} samples/s; rows: {', '.join(faults)}")
    pg = faultenv.PrivatePostgres(port=args.pg_port)
    redis_server = faultenv.PrivateRedis(port=args.redis_port, log_dir=state / "logs")
    rows: list[dict] = []
    agents: list[BenchAgent] = []
    generator = None
    pg.create()
    try:
        redis_server.start()
        env = dict(os.environ, DATABASE_URL=pg.url, REDIS_URL=redis_server.url, DJANGO_SETTINGS_MODULE="kalena_web.settings",
                   KALENA_LOG_LEVEL="WARNING")
        os.environ.update({k: env[k] for k in ("DATABASE_URL", "REDIS_URL", "DJANGO_SETTINGS_MODULE")})
        import django

        django.setup()
        from django.core.management import call_command

        from kalena_web.cli.bench_ingest import _cluster

        call_command("migrate", verbosity=0)
        nodes = _cluster(args.agents)
        node_ids = [n.id for n in nodes]
        initial = _initial_workloads(node_ids)
        pods = sum(len(n.workloads) for n in nodes)
        interval_s = pods / args.rate
        print(f"cluster: {len(nodes)} nodes, {pods} pods; every agent sends every {interval_s:.2f} s; "
              f"PostgreSQL {pg.version} on :{pg.port}, Redis on :{redis_server.port}, Daphne on :{args.daphne_port}")
        with benchenv.processes(env, state / "logs") as procs:
            rig = Rig(args=args, pg=pg, redis=redis_server, procs=procs, agents=agents)
            rig.start_daphne()
            rig.start_workers()
            bindir = Path(sys.executable).parent
            procs.start("beat", [str(bindir / "celery"), "-A", "kalena_web", "beat", "-l", "WARNING",
                                 "-s", str(state / "logs" / "beat-schedule"), "--pidfile", str(state / "logs" / "beat.pid")])
            url = f"ws://127.0.0.1:{args.daphne_port}/agent/v1/ws"
            agents.extend(BenchAgent(node=n, directory=state / "agents" / n.name, url=url, interval_s=interval_s)
                          for n in nodes)
            for agent in agents:
                agent.start()
            end = time.monotonic() + 120
            while not all(a.client.connected.is_set() for a in agents) and time.monotonic() < end:
                time.sleep(0.2)
            generator = Generator(agents, interval_s=interval_s, log_path=state / "generated.jsonl")
            generator.start()
            for i, fault in enumerate(faults):
                row = run_row(i, fault, rig, generator, initial, node_ids)
                rows.append(row)
                print(_format_row(row), flush=True)
            generator.stop()
            _stop_agents(agents)                             # while Daphne is up
    finally:
        if generator is not None and generator._thread.is_alive():
            generator.stop()
        _stop_agents(agents)
        redis_server.stop()
        from django.db import connections

        connections.close_all()
        if not args.keep:
            pg.drop()
    summary = {"agents": args.agents, "rate": args.rate, "warmup_s": args.warmup_s, "outage_s": args.outage_s,
               "rows": rows, "floor": {"samples_lost": 0, "double_applied": 0, "reservations_mismatched": 0,
                                       "recovery_s_max": FLOOR_RECOVERY_S},
               "floor_met": bool(rows) and all(_floor_met(r) for r in rows), "generated_log": str(state / "generated.jsonl")}
    print(json.dumps(summary, indent=2))
    if args.summary_json is not None:
        args.summary_json.parent.mkdir(parents=True, exist_ok=True)
        args.summary_json.write_text(json.dumps(summary, indent=2) + "\n")
        print(f"summary written to {args.summary_json}")
    return 0 if summary["floor_met"] else 1


def _stop_agents(agents: list[BenchAgent]) -> None:
    """Stop every running agent, many at a time (each stop waits for its link thread)."""
    from concurrent.futures import ThreadPoolExecutor

    running = [a for a in agents if a.client is not None]
    with ThreadPoolExecutor(max_workers=32) as pool:
        list(pool.map(BenchAgent.stop, running))
    for agent in running:
        agent.client = None


def _format_row(row: dict) -> str:
    def num(key: str, fmt: str = ",") -> str:
        return "–" if row[key] is None else format(row[key], fmt)

    cores = "–" if row["cores"] is None else " ".join(f"{k} {v:g}" for k, v in row["cores"].items())

    loops = ""
    if row["loop_gap_s"] is not None:
        gaps = ", ".join(f"{k} {'–' if v is None else format(v, 'g') + ' s'}" for k, v in row["loop_gap_s"].items())
        held = ", ".join(row["locks_held_at_kill"]) or "none"
        loops = f"  loops resumed after the kill: {gaps} (locks held at the kill: {held})"
    return (f"  {row['fault']:<18} sent {row['samples_sent']:>7,}  stored {row['samples_stored']:>7,}  "
            f"lost {row['samples_lost']:>4}  double {row['double_applied']:>3}  "
            f"mismatched {row['reservations_mismatched']:>3}  recovery {num('recovery_s', 'g')} s "
            f"(applied {num('applied_s', 'g')} s, reconnected {num('reconnect_s', 'g')} s)  "
            f"backlog {num('backlog_samples')}  drain {num('drain_per_s')}/s vs arrival {num('arrival_per_s')}/s  "
            f"{num('samples_per_write')} samples/write  cores {cores}  "
            f"machine {num('machine_busy_pct', 'g')} % busy  load {row['load_1m']:g}{loops}")
