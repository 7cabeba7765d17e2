"""``kalena bench docker``: Kalena on real Docker engines end to end (prints figures; not a
timed test).

Setup: a dedicated PostgreSQL database (recreated); ``--engines`` private dockerd (own sockets,
data roots, cgroup parents and cpusets, one cpu each round-robin, ``--node-memory`` each:
agents/bench/dockerd.py) as the nodes of one live cluster — or, with ``--swarm``, the engines joined
into one Swarm (the first a manager, the others workers, each on its own loopback address
``<--subnet>.<i+2>``, nodes named by their node label); Daphne in the embedded mode (estimation eager in its process) and one real
``kalena-agent run`` per node; the watcher and reconciler, the scheduling pass and the
eviction-record loop run in this process (every 0.5 s). Each node runs a production container
(request 200m / 64Mi).

Run: ``--pods`` batch pods (request 100m / 48Mi, limit 500m / 64Mi, each holding 40 MiB) that
run ``--duration-s`` seconds each are submitted at once (eight fit a node). Every
``--pressure-every-s`` seconds the production container of one node (round-robin) takes
``--pressure-mib`` of memory for ``--pressure-hold-s``: the node's working set passes 0.95 C and
Σr > C, so its agent evicts the youngest batch until Σr ≤ C (about half of them with the
defaults, once five or more run there); each evicted pod is requeued and placed again
(cooldown ``--cooldown-s``).

With ``--swarm`` and ``--stop-engine-s`` (60 s), once the first pods completed the last
worker's engine is frozen (SIGSTOP: its containers keep running, the managers see the node
down) for that long and then resumed: its batch is declared lost no faster than docs/design.md's 0.1
node per second (after the watcher's 40 s grace), requeued and placed on the others, and the
copies it still runs when it comes back are stopped.

Figures: ``submit_to_running_p50_ms`` / ``_p99_ms`` (submission → the engine's ``start`` event
of the pod's first container); ``evict_to_replaced_p50_ms`` / ``_p99_ms`` (the agent's eviction
report → the next container's ``start``); ``pods_completed``, ``completed_per_min`` (completed
pods / (last completion − first submission)); ``pods_evicted`` and its share; ``pods_lost``
(submitted, not completed, not queued or placed at the end); ``pods_duplicated`` (pods seen with
two running containers on the engines that answer, polled every 0.5 s, for
``DUPLICATE_GRACE_S`` or more: a copy left running twice — ``duplicate_overlap_max_s`` is the
longest overlap seen, a returning node's old copy until it is stopped); ``swarm_nodes`` (Swarm
nodes ready at the start), ``pods_node_lost`` (pods requeued because their node was lost),
``agent_exits`` (agents that exited during the run); ``freeze_to_not_ready_s`` /
``freeze_to_node_lost_s`` (the frozen engine → its node not ready in Kalena / its pods declared
lost); ``bind_to_running_p50_ms``
(the ledger accepting the binding → the container's ``start`` event: Kalena's own path without
the queue); ``engine_start_p50_ms`` (the
engine's own create+start of a bare container, measured first on the same engines).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import time
import uuid
from dataclasses import replace
from pathlib import Path

DEFAULT_DB = "postgres://postgres@127.0.0.1:5432/kalena_bench_docker"
MIB = 2**20
#: Two running copies of a pod seen this long (s) count as duplicated (a copy left running).
DUPLICATE_GRACE_S = 10.0
BATCH_HOLD_MIB = 40  # each batch pod holds this much memory while it runs


def add_parsers(which: argparse._SubParsersAction) -> None:
    p = which.add_parser("docker", help="Kalena on private Docker engines (or a Swarm) with real agents",
                         description=__doc__.split("\n\n")[1])
    p.add_argument("--engines", type=int, default=2, help="private engines = nodes (2)")
    p.add_argument("--pods", type=int, default=100, help="batch pods submitted (100)")
    p.add_argument("--swarm", action="store_true",
                   help="the engines joined into one Swarm: the first a manager, the others workers")
    p.add_argument("--subnet", default="127.0.0",
                   help="with --swarm: loopback /24 prefix of the nodes' addresses, node i on <subnet>.(i+2) (127.0.0)")
    p.add_argument("--stop-engine-s", type=float, default=60.0,
                   help="with --swarm and 2+ engines: freeze the last worker's engine this long mid-run (60; 0: never)")
    p.add_argument("--duration-s", type=float, default=8.0, help="each pod's run time (8 s)")
    p.add_argument("--node-memory", default="512Mi", help="each node's memory capacity (512Mi)")
    p.add_argument("--pressure-every-s", type=float, default=10.0, help="a memory pulse on one node this often (10)")
    p.add_argument("--pressure-mib", type=int, default=300, help="memory the production container takes (300)")
    p.add_argument("--cooldown-s", type=float, default=30.0,
                   help="eviction cooldown per (pod, node) for this run (30; the policy's default 600 s outlasts "
                        "a benchmark of 8 s pods)")
    p.add_argument("--pressure-hold-s", type=float, default=4.0, help="how long it holds it (4)")
    p.add_argument("--timeout", type=float, default=600.0, help="give up after this many seconds (600)")
    p.add_argument("--root", type=Path, default=Path("var/bench-docker"), help="engines' directories (var/bench-docker)")
    p.add_argument("--database-url", default=DEFAULT_DB, help=f"PostgreSQL database to (re)create ({DEFAULT_DB})")
    p.add_argument("--summary-json", type=Path, help="also write the figures to this JSON file")
    p.set_defaults(handler=handle)


def _check(args: argparse.Namespace) -> None:
    from kalena_web.cli.benchenv import BenchEnvError

    if args.engines < 1 or args.pods < 1 or args.duration_s <= 0 or args.pressure_every_s <= 0:
        raise BenchEnvError("--engines, --pods, --duration-s and --pressure-every-s must be positive",
                            field="bench docker")
    if args.summary_json is not None and not args.summary_json.parent.is_dir():
        raise BenchEnvError(f"{args.summary_json.parent} is not a directory", field="--summary-json")


def _setup_django(url: str, kind: str) -> None:
    from kalena_web.cli import benchenv

    benchenv.recreate_database(url)
    os.environ.update(DATABASE_URL=url, DJANGO_SETTINGS_MODULE="kalena_web.settings", KALENA_ORCHESTRATOR=kind)
    os.environ.pop("REDIS_URL", None)
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)


def _engine_start_ms(engines, runs: int = 5) -> list[float]:
    out = []
    for engine in engines:
        client = engine.client()
        for _ in range(runs):
            t = time.perf_counter()
            c = client.containers.run("kalena/busybox:test", ["true"], detach=True, network_mode="none")
            out.append((time.perf_counter() - t) * 1000.0)
            c.remove(force=True)
        client.close()
    return out


def _percentile(values: list[float], q: float) -> float | None:
    import numpy as np

    return round(float(np.percentile(values, q)), 1) if values else None


def handle(args: argparse.Namespace) -> int:
    import numpy as np

    _check(args)
    kind = "swarm" if args.swarm else "docker"
    n_engines = args.engines
    print(f"kalena bench docker: {n_engines} engine(s){' joined into one Swarm' if args.swarm else ''}, "
          f"{args.pods} pods of {args.duration_s:g} s, a memory pulse every {args.pressure_every_s:g} s")
    _setup_django(args.database_url, kind)
    from agents.bench.dockerd import PrivateEngines, agent_command
    from agents.orchestrators.docker import DockerOrchestrator, Engine, EngineConfig, SwarmOrchestrator
    from kalena_engine.policy import Policy
    from kalena_web.archive.evictions import evictions_record
    from kalena_web.archive.models import EvictionRecord
    from kalena_web.control.models import NodeCondition
    from kalena_web.cli.benchenv import Processes, free_port
    from kalena_web.control.reconciler import Reconciler
    from kalena_web.control.watching import watch_start
    from kalena_web.inventory.models import Cluster, Node
    from kalena_web.ledger.models import LiveNodeLedger
    from kalena_web.scheduling.models import BatchPod
    from kalena_web.scheduling.services import batch_submit, scheduling_pass
    from kalena_web.telemetry.models import MitigationEvent
    from kalena_web.telemetry.services import agent_token_create

    tag = uuid.uuid4().hex[:6]
    cpus = os.cpu_count() or 1
    root = args.root.resolve() / tag
    log_dir = root / "logs"
    names = tuple(f"bench-{i}" for i in range(n_engines))
    engines = PrivateEngines(root, names, tuple(str(i % cpus) for i in range(n_engines)), memory=args.node_memory,
                             tag=tag)
    procs = None
    watch = None
    try:
        engines.start()
        log_dir.mkdir(parents=True, exist_ok=True)
        start_ms = _engine_start_ms(engines.engines)
        if args.swarm:
            swarm_port = free_port()
            engines.swarm_form([(f"{args.subnet}.{i + 2}", swarm_port) for i in range(n_engines)])
            orchestrator = SwarmOrchestrator(Engine(EngineConfig(url=engines.engines[0].url)),
                                             engines=[Engine(EngineConfig(url=e.url, timeout_s=5))
                                                      for e in engines.engines])
            node_names = list(names)
            swarm_nodes = len(orchestrator.nodes())
        else:
            orchestrator = DockerOrchestrator([Engine(EngineConfig(url=e.url, node=e.node)) for e in engines.engines])
            node_names = list(names)
            swarm_nodes = 0
        cluster = Cluster.objects.create(name=f"bench-docker-{tag}", kind=Cluster.LIVE)
        watch = watch_start(cluster=cluster, orchestrator=orchestrator, reconciler=Reconciler(cluster=cluster))
        deadline = time.monotonic() + 60
        while Node.objects.filter(cluster=cluster).count() < len(node_names) and time.monotonic() < deadline:
            time.sleep(0.2)
        port = free_port()
        env = {k: v for k, v in os.environ.items() if k != "REDIS_URL"}
        procs = Processes(env=env, log_dir=log_dir)
        procs.daphne(port)
        production = {}
        for engine, node in zip(engines.engines, node_names, strict=True):
            token_file = log_dir / f"{node}.token"
            token_file.write_text(agent_token_create(node=Node.objects.get(cluster=cluster, name=node))[0] + "\n")
            client = engine.client()
            production[node] = client.containers.run(
                "kalena/busybox:test", ["sleep", "86400"], name="web-0", detach=True, init=True, network_mode="none",
                mem_limit="900m", nano_cpus=1_000_000_000, labels={
                    "kalena.naughtian.io/tier": "service", "kalena.naughtian.io/request-cpu": "200m",
                    "kalena.naughtian.io/request-memory": "64Mi"})
            procs.start(f"agent-{node}", agent_command(
                node=node, url=engine.url, node_cgroup=engine.node_cgroup, capacity=f"cpu=1,memory={args.node_memory}",
                link_url=f"ws://127.0.0.1:{port}/agent/v1/ws", token_file=token_file,
                state_dir=log_dir / f"state-{node}"))
        while LiveNodeLedger.objects.filter(node__cluster=cluster, stale=False).count() < len(node_names):
            if time.monotonic() > deadline + 60:
                raise RuntimeError(f"the agents did not report within 120 s (logs in {log_dir})")
            time.sleep(0.3)
        print(f"  setup: {len(node_names)} node(s) up, agents reporting; engine create+start p50 "
              f"{_percentile(start_ms, 50)} ms")

        script = (f"dd if=/dev/zero bs={BATCH_HOLD_MIB}M count=1 2>/dev/null | sleep 86400 & "
                  f"end=$(( $(date +%s) + {int(round(args.duration_s))} )); while [ $(date +%s) -lt $end ]; do sleep 1; done")
        submitted_s = {}
        for i in range(args.pods):
            name = f"bench/pod-{i:04d}"
            batch_submit(cluster=cluster, name=name, owner=name, request={"cpu": 100, "ram": 48 * MIB},
                         limit={"cpu": 500, "ram": 64 * MIB}, image="kalena/busybox:test", command=["sh", "-c", script],
                         now_s=time.time())
            submitted_s[name] = time.time()
        first_running: dict[str, float] = {}
        running_after_evict: dict[str, list[float]] = {}
        both_since: dict[str, float] = {}  # pod → when two running copies were first seen (this stretch)
        overlap_s: dict[str, float] = {}
        frozen = None
        frozen_until = 0.0
        frozen_at_s = None
        not_ready_at_s = None  # when Kalena saw the frozen node not ready (the managers reporting it down)
        freeze_done = not (args.swarm and n_engines >= 2 and args.stop_engine_s > 0)
        bind_to_running: list[float] = []
        policy = Policy(eviction=replace(Policy().eviction, cooldown_s=args.cooldown_s))
        rng = np.random.default_rng(0)
        t_end = time.monotonic() + args.timeout
        next_pulse = time.monotonic() + args.pressure_every_s
        pulse_node = 0
        last_poll = 0.0
        while time.monotonic() < t_end:
            now = time.time()
            evictions_record(cluster=cluster, now_s=now + 60)
            scheduling_pass(cluster=cluster, orchestrator=orchestrator, policy=policy, now_s=now, rng=rng)
            for name, running_s, requeues, bound_s in BatchPod.objects.filter(
                    cluster=cluster, running_s__isnull=False).values_list("workload__name", "running_s", "requeues",
                                                                          "bound_s"):
                if name not in first_running and bound_s is not None:
                    bind_to_running.append((running_s - bound_s) * 1000.0)
                first_running.setdefault(name, running_s)
                if requeues:
                    seen = running_after_evict.setdefault(name, [])
                    if running_s not in seen and running_s != first_running[name]:
                        seen.append(running_s)
            if time.monotonic() - last_poll >= 0.5:
                last_poll = time.monotonic()
                refs = []
                for engine in engines.engines:
                    if engine is frozen:
                        continue
                    try:
                        client = engine.client(timeout_s=3)
                        refs += [c.labels.get("kalena.naughtian.io/workload") for c in client.containers.list(
                            filters={"label": "kalena.naughtian.io/workload"}, ignore_removed=True)]
                        client.close()
                    except Exception:  # noqa: BLE001 - an engine that does not answer is not counted
                        continue
                twice = {r for r in refs if refs.count(r) > 1}
                for r in twice:
                    both_since.setdefault(r, now)
                    overlap_s[r] = max(overlap_s.get(r, 0.0), now - both_since[r])
                for r in set(both_since) - twice:
                    del both_since[r]
            if not freeze_done and frozen is None and BatchPod.objects.filter(
                    cluster=cluster, state=BatchPod.COMPLETED).exists():
                frozen = engines.engines[-1]
                frozen.process.send_signal(signal.SIGSTOP)
                frozen_at_s = time.time()
                frozen_until = time.monotonic() + args.stop_engine_s
                print(f"  {frozen.node}: engine frozen for {args.stop_engine_s:g} s", flush=True)
            if frozen is not None and not_ready_at_s is None and NodeCondition.objects.filter(
                    node__cluster=cluster, node__name=frozen.node, ready=False).exists():
                not_ready_at_s = time.time()
            if frozen is not None and time.monotonic() >= frozen_until:
                frozen.process.send_signal(signal.SIGCONT)
                print(f"  {frozen.node}: engine resumed", flush=True)
                frozen, freeze_done = None, True
            if time.monotonic() >= next_pulse:
                node = node_names[pulse_node % len(node_names)]
                if frozen is not None and node == frozen.node:  # its engine does not answer now
                    pulse_node += 1
                    node = node_names[pulse_node % len(node_names)]
                production[node].exec_run(["sh", "-c", f"dd if=/dev/zero bs={args.pressure_mib}M count=1 2>/dev/null "
                                           f"| sleep {args.pressure_hold_s:g}"], detach=True)
                pulse_node += 1
                next_pulse = time.monotonic() + args.pressure_every_s
            done = BatchPod.objects.filter(cluster=cluster, state=BatchPod.COMPLETED).count()
            if done == args.pods and freeze_done:
                break
            time.sleep(0.5)
        if frozen is not None:
            frozen.process.send_signal(signal.SIGCONT)
            frozen = None
        duplicated = {r for r, s in overlap_s.items() if s >= DUPLICATE_GRACE_S}
        figures = _figures(args, cluster, submitted_s, first_running, running_after_evict, duplicated, start_ms,
                           BatchPod, MitigationEvent, kind, n_engines)
        figures["swarm_nodes"] = swarm_nodes
        figures["duplicate_overlap_max_s"] = round(max(overlap_s.values(), default=0.0), 1)
        node_lost = [(r["workload_name"], r["time_s"]) for r in EvictionRecord.objects.filter(cluster=cluster).values(
            "workload_name", "time_s", "detail") if "NodeLost" in str(r["detail"].get("why", ""))]
        figures["pods_node_lost"] = len({name for name, _ in node_lost})
        # engine frozen → its pods declared lost: the managers noticing the node down + the 40 s grace
        figures["freeze_to_not_ready_s"] = (round(not_ready_at_s - frozen_at_s, 1)
                                            if not_ready_at_s and frozen_at_s else None)
        figures["freeze_to_node_lost_s"] = (round(min(t for _, t in node_lost) - frozen_at_s, 1)
                                            if node_lost and frozen_at_s else None)
        figures["engine_stopped_s"] = args.stop_engine_s if (args.swarm and n_engines >= 2) else 0.0
        figures["agent_exits"] = sum(1 for name, proc in procs.procs.items()
                                     if name.startswith("agent-") and proc.poll() is not None)
        figures["bind_to_running_p50_ms"] = _percentile(bind_to_running, 50)
        figures["bind_to_running_p99_ms"] = _percentile(bind_to_running, 99)
    finally:
        if watch is not None:
            watch.stop()
        if procs is not None:
            procs.stop_all()
        if args.swarm and engines.engines:
            for engine in engines.engines:  # an interrupted run may leave one frozen
                if engine.process is not None and engine.process.poll() is None:
                    engine.process.send_signal(signal.SIGCONT)
            engines.swarm_leave()
        engines.stop()
        shutil.rmtree(root / "data", ignore_errors=True)
        for engine in engines.engines:  # the engines' data roots; the logs stay for a look
            shutil.rmtree(engine.directory / "data", ignore_errors=True)
            shutil.rmtree(engine.directory / "exec", ignore_errors=True)
    print(format_figures(figures))
    if args.summary_json:
        args.summary_json.write_text(json.dumps(figures, indent=2))
    return 0 if figures["pods_lost"] == 0 and figures["pods_duplicated"] == 0 and figures["agent_exits"] == 0 else 1


def _figures(args, cluster, submitted_s, first_running, running_after_evict, duplicated, start_ms, BatchPod,
             MitigationEvent, kind, n_engines) -> dict:
    rows = list(BatchPod.objects.filter(cluster=cluster).values_list("workload__name", "state", "ended_s", "requeues"))
    completed = [r for r in rows if r[1] == BatchPod.COMPLETED]
    lost = [r for r in rows if r[1] not in (BatchPod.COMPLETED, BatchPod.PENDING, BatchPod.BOUND)]
    lost += [(n, "missing") for n in submitted_s if n not in {r[0] for r in rows}]
    to_running = [(first_running[n] - submitted_s[n]) * 1000.0 for n in first_running if n in submitted_s]
    evict_ts: dict[str, list[float]] = {}
    for name, ts in MitigationEvent.objects.filter(node__cluster=cluster, action="evict").values_list(
            "workload_name", "ts").order_by("ts"):
        evict_ts.setdefault(name, []).append(ts)
    replaced = []
    for name, starts in running_after_evict.items():
        for ts in evict_ts.get(name, []):
            later = [s for s in starts if s > ts]
            if later:
                replaced.append((min(later) - ts) * 1000.0)
    span_s = (max(r[2] for r in completed) - min(submitted_s.values())) if completed else 0.0
    evicted = sum(1 for r in rows if r[3] > 0)
    return {
        "orchestrator": kind, "engines": n_engines, "pods": args.pods, "duration_s": args.duration_s,
        "pressure_mib": args.pressure_mib, "pressure_every_s": args.pressure_every_s, "cooldown_s": args.cooldown_s,
        "pods_completed": len(completed), "completed_per_min": round(len(completed) / span_s * 60.0, 1) if span_s else 0.0,
        "submit_to_running_p50_ms": _percentile(to_running, 50), "submit_to_running_p99_ms": _percentile(to_running, 99),
        "evict_to_replaced_p50_ms": _percentile(replaced, 50), "evict_to_replaced_p99_ms": _percentile(replaced, 99),
        "pods_evicted": evicted, "evicted_share": round(evicted / args.pods, 3),
        "evictions": sum(len(v) for v in evict_ts.values()), "replacements_measured": len(replaced),
        "pods_lost": len(lost), "pods_duplicated": len(duplicated),
        "engine_start_p50_ms": _percentile(start_ms, 50), "engine_start_p99_ms": _percentile(start_ms, 99),
    }


def format_figures(f: dict) -> str:
    lines = [
        ("pods completed", f"{f['pods_completed']} / {f['pods']} ({f['completed_per_min']} per minute)"),
        ("submit → running", f"p50 {f['submit_to_running_p50_ms']} ms, p99 {f['submit_to_running_p99_ms']} ms"),
        ("evicted by memory pressure", f"{f['pods_evicted']} pods ({f['evicted_share']:.0%}), {f['evictions']} evictions"),
        ("eviction → re-placed", f"p50 {f['evict_to_replaced_p50_ms']} ms, p99 {f['evict_to_replaced_p99_ms']} ms "
                                 f"({f['replacements_measured']} measured)"),
        ("bind → running", f"p50 {f.get('bind_to_running_p50_ms')} ms, p99 {f.get('bind_to_running_p99_ms')} ms "
                           "(Kalena's bind call + the engine's start event, no queueing)"),
        ("engine create+start", f"p50 {f['engine_start_p50_ms']} ms, p99 {f['engine_start_p99_ms']} ms"),
        ("lost / duplicated", f"{f['pods_lost']} / {f['pods_duplicated']}"),
        ("agents exited", f"{f.get('agent_exits')}"),
    ]
    if f.get("orchestrator") == "swarm":
        lines += [("swarm nodes", f"{f.get('swarm_nodes')}"),
                  ("engine stopped", f"{f.get('engine_stopped_s')} s: {f.get('pods_node_lost')} pods lost with the "
                                     f"node {f.get('freeze_to_node_lost_s')} s after it stopped (not ready after "
                                     f"{f.get('freeze_to_not_ready_s')} s), re-placed; "
                                     f"longest two-copy overlap {f.get('duplicate_overlap_max_s')} s")]
    lines += [(k, str(f.get(k))) for k in ("swarm_nodes", "pods_completed", "pods_lost", "pods_duplicated",
                                           "agent_exits")]
    return "\n".join(f"  {k:<28} {v}" for k, v in lines)
