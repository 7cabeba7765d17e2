"""``kalena bench kubernetes``: Kalena as a secondary scheduler end to end against the test
API server on loopback (prints figures; not a timed test).

Setup: a dedicated PostgreSQL database (recreated), the real ``irina-186-3d`` infrastructure,
workloads and blueprint replicated to ``--nodes`` nodes and imported as a live cluster (its
telemetry marked fresh: no agents run here), and the same nodes registered in
:class:`~agents.orchestrators.kubernetes.testserver.TestAPIServer` with their allocatable. The
test API server runs in a process of its own (a real API server is a separate process: the
schedulers do not share its interpreter), on loopback. Two candidate schedulers
(:class:`~kalena_web.control.leading.ClusterScheduler`, each with its own ``kubernetes``
client, watch, reconciler and Lease elector, binding over ``bind_concurrency`` connections at
once) run in this process.

Run: ``--pods`` batch pods (``schedulerName: kalena``, owned by ``--jobs`` Jobs; as in
kube-scheduler's scheduler_perf SchedulingBasic, the pods of one Job are identical: each Job's
request is drawn once from a seeded grid of 100m–1 cpu and 128Mi–2Gi) are created in the
server at ``--arrival-rate``
pods/s (default 0 = all at once, i.e. faster than the scheduler can bind). When a third are
bound, every open watch gets ``ERROR 410`` (a re-list); when two thirds are bound, the leader
is killed (not with ``--no-kill``): it stops at once, binding nothing more, and its lease is left
to expire, so the standby takes over only after the lease duration — the pods created meanwhile
wait for it, so with a kill the p99 holds the lease duration.

Figures: ``created_to_bound_p50_ms`` / ``_p99_ms`` (server-side creation → binding stored);
``pods_bound_per_s`` = pods bound / (end − first creation − ``failover_gap_s``), the end being
the last binding or, when later, the moment the last queued Event (``Scheduled``,
``FailedScheduling``, the ``PodScheduled`` condition) was sent
(``events_drained_after_last_binding_s`` says how much later);
``failover_gap_s`` = the killed leader's last lease renewal → the standby's acquisition;
``process_cpu_s`` and ``pods_bound_per_cpu_s``: the CPU the schedulers' process (both
candidates, watches, reconcilers, event senders) used while the pods were bound, and
``api_server_cpu_s`` the API server's process (from its start) — on a shared machine the
wall-clock rate says as much about the neighbours as about Kalena; ``thread_cpu_s`` splits the
process's CPU by thread kind (each thread's own clock, sampled every 50 ms, so the killed
leader's threads count up to their end): where the CPU per pod goes;
``pods_lost`` = created, never bound and not pending in Kalena at the end;
``pods_double_bound`` = 409 "already assigned" answers + binding requests naming a node other
than the pod's first; ``engine_only_per_s`` = the engine's placement rate for the same pods on
the same cluster, without API, watch or database (the baseline:
``end_to_end_over_engine`` = ``pods_bound_per_s`` / ``engine_only_per_s``).
"""

from __future__ import annotations

import argparse
import json
import os
import threading
import time
from collections import Counter
from pathlib import Path

DEFAULT_DB = "postgres://postgres@127.0.0.1:5432/kalena_bench_kubernetes"


def _serve(conn, bookmark_interval_s: float) -> None:
    """The test API server's process (its own interpreter, as a real API server is a process
    of its own): serves HTTP on loopback and answers the benchmark's commands on ``conn``.
    Pods are created here (server-side, as by a client of the API) and the creation and
    binding times are taken here."""
    from agents.orchestrators.kubernetes.testserver import TestAPIServer, pod

    # no controller doubles: the benchmark's pods are bare, and their thread would share the server's CPU
    api = TestAPIServer(bookmark_interval_s=bookmark_interval_s, record_bodies=True, controllers=False)
    created_at: dict[str, float] = {}
    bound_at: dict[str, float] = {}
    api.bound_hooks.insert(0, lambda server, key, node: bound_at.__setitem__(key, time.time()))
    api.start()
    conn.send(api.url)
    creator: threading.Thread | None = None

    def create_all(n: int, jobs: int, cpus: list, mems: list, rate: float) -> None:
        start = time.monotonic()
        for i in range(n):
            if rate:
                wait = start + i / rate - time.monotonic()
                if wait > 0:
                    time.sleep(wait)
            job = f"job-{i % jobs}"
            name = f"{job}-{i}"
            created_at[f"bench/{name}"] = time.time()
            api.create_pod(pod("bench", name, tier="batch", owner_kind="Job", owner_name=job, labels={"app": job},
                               cpu=f"{cpus[i]}m", memory=f"{mems[i]}Mi", limit_cpu=f"{cpus[i]}m",
                               limit_memory=f"{mems[i]}Mi"))

    while True:
        command, *rest = conn.recv()
        if command == "nodes":
            for obj in rest[0]:
                api.create("nodes", obj)
            conn.send(len(rest[0]))
        elif command == "pods":
            creator = threading.Thread(target=create_all, args=tuple(rest), name="bench-creator", daemon=True)
            creator.start()
            conn.send(True)
        elif command == "progress":
            conn.send((len(bound_at), creator is not None and creator.is_alive()))
        elif command == "expire":
            api.expire_watches()
            conn.send(True)
        elif command == "results":
            bindings = [(path, (body.get("target") or {}).get("name")) for verb, path, body in api.requests
                        if verb == "POST" and path.endswith("/binding") and isinstance(body, dict)]
            conflicts = sum(1 for verb, path, code in api.answers
                            if verb == "POST" and path.endswith("/binding") and code == 409)
            conn.send(dict(created_at=dict(created_at), bound_at=dict(bound_at), bindings=bindings,
                           conflicts=conflicts, calls={f"{v} {r}": n for (v, r), n in sorted(api.calls.items())},
                           cpu_s=time.process_time()))
        elif command == "stop":
            api.stop()
            conn.send(True)
            return


class _ServerProcess:
    """The benchmark's handle on :func:`_serve` running in a child process (spawned: a clean
    interpreter, no Django, no inherited database connections)."""

    def __init__(self, bookmark_interval_s: float) -> None:
        import multiprocessing

        ctx = multiprocessing.get_context("spawn")
        self._conn, child = ctx.Pipe()
        self.process = ctx.Process(target=_serve, args=(child, bookmark_interval_s), name="kube-test-api",
                                   daemon=True)
        self.process.start()
        self.url = self._conn.recv()
        self._lock = threading.Lock()

    def ask(self, *command):
        with self._lock:
            self._conn.send(command)
            return self._conn.recv()

    def stop(self) -> None:
        if self.process.is_alive():
            self.ask("stop")
        self.process.join(timeout=10)


def add_parsers(which: argparse._SubParsersAction) -> None:
    p = which.add_parser("kubernetes", help="secondary scheduler end to end against the test API server",
                         description=__doc__.split("\n\n")[1])
    p.add_argument("--nodes", type=int, default=5000, help="cluster size (5000)")
    p.add_argument("--pods", type=int, default=10_000, help="batch pods created (10,000)")
    p.add_argument("--arrival-rate", type=float, default=0.0,
                   help="pods created per second (0 = all at once: faster than the scheduler binds)")
    p.add_argument("--lease-duration", type=float, default=15.0, help="Lease duration s (client-go 15)")
    p.add_argument("--renew-deadline", type=float, default=10.0, help="renew deadline s (client-go 10)")
    p.add_argument("--retry-period", type=float, default=2.0, help="retry period s (client-go 2)")
    p.add_argument("--timeout", type=float, default=900.0, help="give up after this many seconds (900)")
    p.add_argument("--jobs", type=int, default=20, help="Jobs owning the pods (20)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--database-url", default=DEFAULT_DB, help=f"PostgreSQL database to (re)create ({DEFAULT_DB})")
    p.add_argument("--keep-db", action="store_true", help="keep the database afterwards")
    p.add_argument("--summary-json", type=Path, help="also write the figures to this JSON file")
    p.add_argument("--shards", type=int, default=0,
                   help="N ≥ 1: N sharded instances (kalena watch --shards), each in its own process, one killed "
                        "at two thirds when N ≥ 2 (docs/scheduler.md \"Sharding\"); 0 (default): a leader and a "
                        "standby")
    p.add_argument("--wire-cost", type=int, default=0, metavar="N",
                   help="only measure the CPU of the Binding and Event calls for N pods, one after another, beside "
                        "plain HTTP POSTs (no database, no scheduling; kalena_web/cli/bench_wire.py)")
    p.add_argument("--no-kill", action="store_true",
                   help="kill no instance (the leader, or with --shards the last instance): the latency of "
                        "a steady state, the 410 re-list still inside")
    p.set_defaults(handler=handle)


def _setup_django(url: str) -> None:
    from kalena_web.cli import benchenv

    benchenv.recreate_database(url)
    os.environ.update(DATABASE_URL=url, DJANGO_SETTINGS_MODULE="kalena_web.settings", KALENA_ORCHESTRATOR="kubernetes")
    os.environ.pop("REDIS_URL", None)
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)


def _cluster(n_nodes: int):
    from kalena_engine.kuberina import load_blueprint, load_infrastructure, load_workloads
    from kalena_web.cli.bench_cluster import replicate
    from kalena_web.cli.inputs import DEFAULTS
    from kalena_web.cli.paths import data_path
    from kalena_web.control.services import live_cluster_import
    from kalena_web.ledger.models import LiveNodeLedger

    workloads = load_workloads(data_path(DEFAULTS["workloads"]))
    infra, workloads, blueprint = replicate(load_infrastructure(data_path(DEFAULTS["infra"])), workloads,
                                            load_blueprint(data_path(DEFAULTS["blueprint"]), workloads), n_nodes)
    cluster = live_cluster_import(name="bench-kubernetes", infra=infra, workloads=workloads, blueprint=blueprint,
                                  now_s=time.time()).cluster
    LiveNodeLedger.objects.filter(node__cluster=cluster).update(stale=False, last_sample_s=time.time())
    return cluster


def _node_json(name: str, allocatable, labels) -> dict:
    from agents.orchestrators.kubernetes.testserver import node

    cpu_m = int(allocatable[0]) if allocatable[0] != float("inf") else 64000
    mem = int(allocatable[1]) if allocatable[1] != float("inf") else 256 * 2**30
    return node(name, cpu=f"{cpu_m}m", memory=str(mem), labels={k: str(v) for k, v in (labels or {}).items()})


def handle(args: argparse.Namespace) -> int:
    import numpy as np

    if args.wire_cost:
        from kalena_web.cli import bench_wire

        return bench_wire.handle(args.wire_cost, args.summary_json)
    _check_arguments(args)  # before anything is created: bad input changes nothing

    print(f"kalena bench kubernetes: {args.nodes} nodes, {args.pods} pods, arrival "
          f"{'all at once' if not args.arrival_rate else f'{args.arrival_rate:g}/s'}")
    _setup_django(args.database_url)
    t0 = time.monotonic()
    cluster = _cluster(args.nodes)
    from kubernetes import client as k8s

    from agents.orchestrators.kubernetes import KubernetesOrchestrator
    from agents.orchestrators.kubernetes.lease import LeaderElector
    from kalena_web.cli import benchenv
    from kalena_web.control.leading import ClusterScheduler
    from kalena_web.control.orchestrators import BIND_POOL
    from kalena_web.inventory.models import Node
    from kalena_web.scheduling.models import BatchPod

    api = _ServerProcess(bookmark_interval_s=30.0)
    api.ask("nodes", [_node_json(name, allocatable, labels) for name, allocatable, labels in
                      Node.objects.filter(cluster=cluster).values_list("name", "allocatable", "labels")])
    setup_s = time.monotonic() - t0
    print(f"  setup: cluster imported and {args.nodes} nodes registered in {setup_s:.1f} s "
          f"(test API server in its own process, pid {api.process.pid})")
    if args.shards:
        return _sharded(args, api, cluster, t0, setup_s)

    def candidate(identity: str) -> ClusterScheduler:
        configuration = k8s.Configuration(host=api.url)
        configuration.connection_pool_maxsize = BIND_POOL  # as kubernetes_api_client() configures it
        orch = KubernetesOrchestrator(k8s.ApiClient(configuration), request_timeout_s=10.0, identity=identity)
        elector = LeaderElector(orch, identity=identity, lease_duration_s=args.lease_duration,
                                renew_deadline_s=args.renew_deadline, retry_period_s=args.retry_period)
        return ClusterScheduler(cluster=cluster, orchestrator=orch, elector=elector, pass_period_s=1.0,
                                rng=np.random.default_rng(args.seed))

    a, b = candidate("kalena-a"), candidate("kalena-b")
    from kalena_web.cli.watch import startup_frozen

    startup_frozen()  # as `kalena watch` does before it starts
    a.start()
    deadline = time.monotonic() + 120
    while not a.elector.is_leader() or a.watch is None:
        if time.monotonic() > deadline:
            raise RuntimeError("the first candidate never took the lease")
        time.sleep(0.05)
    b.start()
    # wait until the leader's watch has listed the nodes (its reconciler applied them)
    # (a leader that lost its lease under load meanwhile has no watch until it leads again)
    while (watch := a.watch) is None or watch.reconciler.counts.get("Resynced", Counter()).total() < 1:
        if time.monotonic() > deadline + 120:
            raise RuntimeError("the first candidate's watch never listed the cluster")
        time.sleep(0.1)
    print(f"  leader kalena-a watching ({time.monotonic() - t0:.1f} s since start)")

    create_pods(args, api)
    started_wall = time.time()
    cpu_start = time.process_time()
    threads = benchenv.ThreadCpu()
    load_start = os.getloadavg()[0]
    expired = killed = False
    gap_s = None
    end = time.monotonic() + args.timeout
    last_print = 0.0
    while time.monotonic() < end:
        n, creating = api.ask("progress")
        if not expired and n >= args.pods / 3:
            api.ask("expire")
            expired = True
            print(f"  {n} bound: ERROR 410 sent to every watch (re-list)")
        if expired and not killed and not args.no_kill and n >= 2 * args.pods / 3:
            threads.sample()  # the leader's threads as they stop
            a.stop(release=False)
            killed = True
            print(f"  {n} bound: leader kalena-a killed (lease left to expire)")
        if killed and gap_s is None and b.elector.acquired_at is not None:
            renewed = a.elector._renewed_at
            if renewed is None or b.elector.acquired_at < renewed:
                # the leader had lost its lease (a renewal missed under load) before the kill and
                # the standby leads already: no failover gap to take out of the rate
                gap_s = 0.0
                print("  kalena-b was leading already (kalena-a lost its lease before the kill): gap 0")
            else:
                gap_s = b.elector.acquired_at - renewed
                print(f"  kalena-b took the lease after a {gap_s:.1f} s gap")
        if n >= args.pods and not creating:
            break
        if time.monotonic() - last_print > 10:
            print(f"  … {n}/{args.pods} bound")
            last_print = time.monotonic()
        threads.sample()
        time.sleep(0.05)
    # Events are part of the pipeline: the run ends when the last one queued has been sent
    for candidate_ in (a, b):
        candidate_.orchestrator.flush_events(timeout_s=120.0)
    events_done = time.time()
    cpu_s = time.process_time() - cpu_start
    threads.sample()
    load_end = os.getloadavg()[0]
    server = api.ask("results")
    b.stop()
    if not killed:
        a.stop()
    api.stop()

    figures = _figures(args, server, started_wall, events_done, gap_s, BatchPod, cluster, a, b)
    figures["setup_s"] = round(setup_s, 1)
    # CPU seconds the schedulers' process (both candidates, watches, reconcilers, event senders)
    # and the API server's process used while pods were bound, and the machine's load, say how
    # contended the run was
    figures["process_cpu_s"] = round(cpu_s, 1)
    figures["pods_bound_per_cpu_s"] = round(figures["pods_bound"] / max(cpu_s, 1e-9), 1)
    figures["thread_cpu_s"] = threads.spent()
    figures["api_server_cpu_s"] = round(server["cpu_s"], 1)
    figures["load_average_1m"] = [round(load_start, 1), round(load_end, 1)]
    figures["cpus"] = os.cpu_count()
    for key, value in figures.items():
        print(f"  {key}: {value}")
    return _finish(args, figures)


def _check_arguments(args: argparse.Namespace) -> None:
    """Refuse bad input before the database, the cluster or a process exists (SystemExit naming
    the flag): the Lease timings are checked here, not in the instances, which would die in
    their own processes and leave the benchmark waiting for them."""
    if args.shards < 0:
        raise SystemExit(f"kalena bench kubernetes: --shards {args.shards}: need 0 (one leader and a standby) "
                         "or N ≥ 1 sharded instances")
    if args.nodes < 1 or args.pods < 1:
        raise SystemExit("kalena bench kubernetes: --nodes and --pods: need at least 1 each")
    if not 0 < args.retry_period < args.renew_deadline < args.lease_duration:
        raise SystemExit(f"kalena bench kubernetes: --retry-period {args.retry_period:g} < --renew-deadline "
                         f"{args.renew_deadline:g} < --lease-duration {args.lease_duration:g} does not hold "
                         "(as client-go's leader election needs)")


def _sharded(args, api, cluster, t0: float, setup_s: float) -> int:
    from kalena_web.cli import bench_shards

    try:
        figures = bench_shards.run(args, api, cluster, t0)
    finally:
        api.stop()
    figures["setup_s"] = round(setup_s, 1)
    figures["cpus"] = os.cpu_count()
    figures["load_average_1m"] = round(os.getloadavg()[0], 1)
    for key, value in figures.items():
        if key != "instances":
            print(f"  {key}: {value}")
    print(bench_shards.table(figures))
    return _finish(args, figures)


def create_pods(args, api) -> None:
    """Ask the API server's process for ``args.pods`` pods over ``args.jobs`` Jobs, each Job's
    cpu (m) and memory (MiB) drawn once from the run's seed, at ``args.arrival_rate`` (0: at once)."""
    import numpy as np

    rng = np.random.default_rng(args.seed)
    job_cpu = rng.choice([100, 250, 500, 1000], size=args.jobs)
    job_mem = rng.choice([128, 256, 512, 1024, 2048], size=args.jobs)
    cpus, mems = job_cpu[np.arange(args.pods) % args.jobs], job_mem[np.arange(args.pods) % args.jobs]
    api.ask("pods", args.pods, args.jobs, [int(c) for c in cpus], [int(m) for m in mems], args.arrival_rate)


def _finish(args, figures: dict) -> int:
    """Write the summary JSON if asked and drop the benchmark's database unless ``--keep-db``."""
    if args.summary_json:
        args.summary_json.write_text(json.dumps(figures, indent=2))
    if not args.keep_db:
        from django.db import connections

        connections.close_all()
        from kalena_web.cli import benchenv

        benchenv.drop_database(args.database_url)
    return 0


def _figures_common(args, server: dict, started_wall, events_done, gap_s, cluster) -> dict:
    """The figures of both modes: rate, created → bound percentiles, lost, double-bound."""
    import numpy as np

    from kalena_web.scheduling.models import BatchPod

    created_at, bound_at = server["created_at"], server["bound_at"]
    latencies = [(bound_at[k] - created_at[k]) * 1000.0 for k in bound_at if k in created_at]
    bound_n = len(latencies)
    last = max(max(bound_at.values()) if bound_at else started_wall, events_done)
    first = min(created_at.values()) if created_at else started_wall
    span = max(1e-9, last - first - (gap_s or 0.0))
    states = dict(BatchPod.objects.filter(cluster=cluster).values_list("workload__name", "state"))
    lost = [k for k in created_at if k not in bound_at and states.get(k) != "pending"]
    first_target: dict[str, str] = {}
    differing = 0
    for path, target in server["bindings"]:
        if path in first_target and first_target[path] != target:
            differing += 1
        first_target.setdefault(path, target)
    return {
        "nodes": args.nodes, "pods": args.pods, "arrival_rate": args.arrival_rate or "all at once",
        "pods_bound": bound_n, "pods_bound_per_s": round(bound_n / span, 1),
        "created_to_bound_p50_ms": round(float(np.percentile(latencies, 50)), 1) if latencies else None,
        "created_to_bound_p99_ms": round(float(np.percentile(latencies, 99)), 1) if latencies else None,
        "pods_lost": len(lost), "pods_double_bound": server["conflicts"] + differing,
        "api_server_cpu_s": round(server["cpu_s"], 1),
        "api_calls": server["calls"],
    }


def _figures(args, server: dict, started_wall, events_done, gap_s, BatchPod, cluster, a, b) -> dict:
    import numpy as np

    created_at, bound_at = server["created_at"], server["bound_at"]
    latencies = [(bound_at[k] - created_at[k]) * 1000.0 for k in bound_at if k in created_at]
    bound_n = len(latencies)
    last_bound = max(bound_at.values()) if bound_at else started_wall
    last = max(last_bound, events_done)
    first = min(created_at.values()) if created_at else started_wall
    span = max(1e-9, last - first - (gap_s or 0.0))
    states = dict(BatchPod.objects.filter(cluster=cluster).values_list("workload__name", "state"))
    lost = [k for k in created_at if k not in bound_at and states.get(k) != "pending"]
    first_target: dict[str, str] = {}
    differing = 0
    for path, target in server["bindings"]:
        if path in first_target and first_target[path] != target:
            differing += 1
        first_target.setdefault(path, target)
    conflicts = server["conflicts"]
    engine_only = _engine_only(cluster, created_at)
    return {
        "nodes": args.nodes, "pods": args.pods,
        "arrival_rate": args.arrival_rate or "all at once",
        "pods_bound": bound_n,
        "pods_bound_per_s": round(bound_n / span, 1),
        "created_to_bound_p50_ms": round(float(np.percentile(latencies, 50)), 1) if latencies else None,
        "created_to_bound_p99_ms": round(float(np.percentile(latencies, 99)), 1) if latencies else None,
        "engine_only_per_s": engine_only,
        # the baseline ratio: how much of the engine's own rate survives the API, watch and database
        "end_to_end_over_engine": round(bound_n / span / engine_only, 4) if engine_only else None,
        "pods_lost": len(lost),
        "pods_double_bound": conflicts + differing,
        "failover_gap_s": round(gap_s, 2) if gap_s is not None else None,
        "passes": a.stats.passes + b.stats.passes,
        "pass_phase_s": {k: round(a.stats.phase_s.get(k, 0.0) + b.stats.phase_s.get(k, 0.0), 2)
                         for k in sorted(set(a.stats.phase_s) | set(b.stats.phase_s))},
        "reconciler_counts": _merged_counts([r for s in (a, b) for r in s.reconcilers]),
        "watch_lists": sum(sum(w.lists.values()) for s in (a, b) for w in s.orchestrator.watchers),
        "watch_410_expired": sum(sum(w.expired.values()) for s in (a, b) for w in s.orchestrator.watchers),
        "watch_reconnects": sum(sum(w.reconnects.values()) for s in (a, b) for w in s.orchestrator.watchers),
        "events_drained_after_last_binding_s": round(max(0.0, events_done - last_bound), 2),
        "events_sent": a.orchestrator.events_sent + b.orchestrator.events_sent,
        "events_dropped": a.orchestrator.events_dropped + b.orchestrator.events_dropped,
        "bind_concurrency": a.orchestrator.bind_concurrency,
        "api_calls": server["calls"],
    }


def _merged_counts(reconcilers) -> dict[str, dict[str, int]]:
    out: dict[str, Counter] = {}
    for r in reconcilers:
        for kind, c in r.counts.items():
            out.setdefault(kind, Counter()).update(c)
    return {k: dict(v) for k, v in sorted(out.items())}


def _engine_only(cluster, created_at) -> float:
    """Placements per second of the engine alone: the same pods, all pending, on the cluster's
    nodes with no batch bound (the state the run started from)."""
    import numpy as np

    from kalena_engine.placement import schedule_batch
    from kalena_engine.policy import Policy
    from kalena_web.scheduling import mappers, selectors
    from kalena_web.scheduling.models import BatchPod

    rows = selectors.node_rows(cluster=cluster)
    rows = [r.__class__(**{**r.__dict__, "batch_request": [0.0] * 8, "batch_reservation": [0.0] * 8}) for r in rows]
    row_of_node = {r.id: i for i, r in enumerate(rows)}
    from kalena_engine.placement import BatchResidents, Evictions

    snapshot = mappers.snapshot(rows, now_s=time.time(), production=selectors.production_pods(
        cluster=cluster, row_of_node=row_of_node), batch=BatchResidents(), evictions=Evictions())
    pods = BatchPod.objects.filter(cluster=cluster).select_related("workload")
    pending = [mappers.PendingRow(pod_id=p.id, name=p.workload.name, namespace=p.workload.namespace,
                                  owner=p.workload.owner, labels=p.workload.labels or {},
                                  constraints=p.workload.constraints or {}, request=p.workload.request,
                                  priority=p.workload.priority, queued_s=p.queued_s, gang="", min_member=None)
               for p in pods]
    if not pending:
        return 0.0
    batch, _ = mappers.pending_batch(pending)
    started = time.perf_counter()
    result = schedule_batch(snapshot, batch, Policy(), rng=np.random.default_rng(0))
    wall = time.perf_counter() - started
    return round(int(result.bindings.count.sum()) / wall, 1)
