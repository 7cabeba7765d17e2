"""``kalena bench kubernetes --shards N``: N sharded scheduler instances (issue 32), each in a
process of its own (so each one's CPU is its process's), against the test API server in another.

The cluster, the API server and the pods are those of ``kalena bench kubernetes``. The N
instances (:class:`~kalena_web.control.sharding.ShardedScheduler`, each with its own client,
watch, reconciler, share Lease and database connections) start together; the pods are created
once every instance acts on its whole share of the ring of all N (and still does two membership
rounds and two scheduling passes later, so its first pass on the share — the first publication of
its nodes' batch capacity — is not measured): not as soon as every vnode is acted on by someone, which the first instances up
reach alone, leaving the last one to join — a re-list and a handover — inside the measured
window. With N ≥ 2, when two thirds of the pods are bound the last
instance is killed (SIGKILL: its Lease is left to expire) and the survivors take its share.

Figures (besides the single-scheduler run's ``pods_bound_per_s``, created → bound p50/p99,
``pods_lost``, ``pods_double_bound``): per instance the pods it bound, its process's CPU
seconds while the pods were bound, ``pods_per_cpu_s``, and the pods decided on its own nodes
and on the whole cluster (``own`` / ``spill``); ``per_instance_pods_per_cpu_s_mean``;
``reassignment_s`` = the kill → every vnode acted on again (a lease duration of it is the
dead Lease's expiry, ``reassignment_after_expiry_s`` the rest: membership rounds and the
re-list that unlocks the moved share); per instance the CPU seconds of each thread kind and what
it did (``work``: events applied per kind and outcome, the reconciler's batches, lists, 410s,
share moves, passes), whole and inside the measured window (``work_in_window``). Each instance
freezes its start-up objects before it starts, as ``kalena watch`` does.
"""

from __future__ import annotations

import os
import signal
import time

from kalena_web.cli import benchenv
from kalena_web.scheduling.shards import VNODES, Ring


def _instance(conn, database_url: str, api_url: str, identity: str, lease: tuple[float, float, float],
              seed: int) -> None:
    """One sharded instance in its own process (spawned: a clean interpreter)."""
    os.environ.update(DATABASE_URL=database_url, DJANGO_SETTINGS_MODULE="kalena_web.settings",
                      KALENA_ORCHESTRATOR="kubernetes")
    os.environ.pop("REDIS_URL", None)
    import django

    django.setup()
    import numpy as np
    from kubernetes import client as k8s

    from agents.orchestrators.kubernetes import KubernetesOrchestrator
    from kalena_web.control.orchestrators import BIND_POOL
    from kalena_web.control.sharding import ShardedScheduler
    from kalena_web.cli.watch import startup_frozen
    from kalena_web.inventory.models import Cluster
    from kalena_web.scheduling.shards import ShareMember

    cluster = Cluster.objects.get(name="bench-kubernetes")
    configuration = k8s.Configuration(host=api_url)
    configuration.connection_pool_maxsize = BIND_POOL
    orch = KubernetesOrchestrator(k8s.ApiClient(configuration), request_timeout_s=10.0, identity=identity)
    member = ShareMember(orch, cluster=cluster.name, identity=identity, lease_duration_s=lease[0],
                         renew_deadline_s=lease[1], retry_period_s=lease[2])
    s = ShardedScheduler(cluster=cluster, orchestrator=orch, member=member, pass_period_s=1.0,
                         rng=np.random.default_rng(seed))
    startup_frozen()  # as `kalena watch` does before it starts
    s.start()
    conn.send(os.getpid())

    def work() -> dict:
        """What the instance did (the reasons behind a CPU figure): the reconciler's outcomes per
        event kind, the watch's lists, 410s and reconnects, the shares gained (syncs) and moved,
        the passes and the decisions refused at assume (stale)."""
        reconcilers = [*s.reconcilers, *([s.watch.reconciler] if s.watch is not None else [])]
        applied: dict[str, dict[str, int]] = {}
        for r in reconcilers:
            for kind, outcomes in list(r.counts.items()):
                for outcome, n in list(outcomes.items()):
                    applied.setdefault(kind, {}).setdefault(outcome, 0)
                    applied[kind][outcome] += n
        watchers = list(getattr(orch, "watchers", []))
        return dict(applied=applied, lists=sum(sum(w.lists.values()) for w in watchers),
                    expired=sum(sum(w.expired.values()) for w in watchers),
                    reconnects=sum(sum(w.reconnects.values()) for w in watchers), syncs=len(s.syncs),
                    moves=len(member.moves), passes=s.stats.passes, batches=sum(r.batches for r in reconcilers),
                    stale_bindings=s.stats.stale_bindings,
                    requeued_unconfirmed=s.stats.requeued_unconfirmed, vnodes=len(member.active()))

    while True:
        command = conn.recv()
        if command == "status":
            conn.send(dict(active=sorted(member.active()), placed=s.stats.placed, cpu_s=time.process_time(),
                           decided=dict(s.shard.decided), threads=benchenv.threads_cpu(), work=work()))
        elif command == "flush":
            conn.send(orch.flush_events(timeout_s=60.0))
        elif command == "stop":
            orch.flush_events(timeout_s=60.0)
            threads = benchenv.threads_cpu()  # before stop: the threads are gone after it
            s.stop()
            conn.send(dict(placed=s.stats.placed, cpu_s=time.process_time(), decided=dict(s.shard.decided),
                           phase_s=dict(s.stats.phase_s), passes=s.stats.passes, syncs=len(s.syncs),
                           events_sent=orch.events_sent, threads=threads, work=work()))
            return


class _Instance:
    def __init__(self, ctx, database_url: str, api_url: str, identity: str, lease, seed: int) -> None:
        self.identity = identity
        self._conn, child = ctx.Pipe()
        self.process = ctx.Process(target=_instance, args=(child, database_url, api_url, identity, lease, seed),
                                   name=identity, daemon=True)
        self.process.start()
        self.pid = self._conn.recv()
        self.killed_at: float | None = None
        self.last: dict = {}

    def ask(self, command: str) -> dict:
        self._conn.send(command)
        self.last = self._conn.recv()
        return self.last

    def kill(self) -> None:
        os.kill(self.pid, signal.SIGKILL)
        self.killed_at = time.time()
        self.process.join(timeout=10)


def run(args, api, cluster, t0: float) -> dict:
    """The sharded run (module doc); returns the figures."""
    import multiprocessing

    import numpy as np
    from django.db import connections

    from kalena_web.cli.bench_kubernetes import _figures_common

    connections.close_all()
    ctx = multiprocessing.get_context("spawn")
    lease = (args.lease_duration, args.renew_deadline, args.retry_period)
    instances = [_Instance(ctx, args.database_url, api.url, f"kalena-{i}", lease, args.seed + i)
                 for i in range(args.shards)]
    # the pods are created once every instance acts on its whole share of the ring of all N — not as
    # soon as every vnode is acted on by someone: the first instances up act on everything before
    # the last one joins, and a share moving after the pods exist would be a re-list and a
    # handover inside the measured window, charged to the instance that joined last
    ring = Ring([x.identity for x in instances])
    deadline = time.monotonic() + 180
    settled_at: float | None = None
    passes_at: dict[str, int] = {}
    while True:
        shares = {x.identity: frozenset(x.ask("status")["active"]) for x in instances}
        passes = {x.identity: int((x.last.get("work") or {}).get("passes") or 0) for x in instances}
        off = [name for name, share in shares.items() if share != ring.vnodes_of(name)]
        if off:
            settled_at = None
        elif settled_at is None:
            settled_at, passes_at = time.monotonic(), passes
        elif time.monotonic() - settled_at >= 2 * args.retry_period and all(
                passes[name] >= passes_at[name] + 2 for name in passes):
            # and still so two rounds later, each instance having ended two passes since: its first
            # pass on the whole share (which publishes the share's batch capacity, one PATCH per node
            # the first time) is over before the measured window opens, not inside it
            break
        if time.monotonic() > deadline:
            raise RuntimeError(f"the {args.shards} instances never settled on the ring's shares (not yet: "
                               f"{', '.join(f'{n} acts on {len(shares[n])} of {len(ring.vnodes_of(n))}' for n in off)})")
        time.sleep(0.2)
    print(f"  {args.shards} sharded instance(s) each acting on its share of all {VNODES} vnodes "
          f"({', '.join(str(len(shares[x.identity])) for x in instances)}; {time.monotonic() - t0:.1f} s since "
          f"start; pids {', '.join(str(x.pid) for x in instances)})")
    cpu0 = {x.identity: x.ask("status")["cpu_s"] for x in instances}
    threads0 = {x.identity: x.last.get("threads", {}) for x in instances}
    work0 = {x.identity: x.last.get("work", {}) for x in instances}
    from kalena_web.cli.bench_kubernetes import create_pods

    create_pods(args, api)
    started_wall = time.time()
    killed: _Instance | None = None
    rehomed_at: float | None = None
    end = time.monotonic() + args.timeout
    last_print = 0.0
    cpu_at_kill: dict[str, float] = {}
    while time.monotonic() < end:
        n, creating = api.ask("progress")
        if args.shards >= 2 and not args.no_kill and killed is None and n >= 2 * args.pods / 3:
            killed = instances[-1]
            killed.ask("status")
            cpu_at_kill[killed.identity] = killed.last["cpu_s"]
            killed.kill()
            print(f"  {n} bound: instance {killed.identity} killed (SIGKILL; its Lease left to expire)")
        live = [x for x in instances if x is not killed]
        if killed is not None and rehomed_at is None:
            union = set().union(*(set(x.ask("status")["active"]) for x in live))
            if len(union) == VNODES:
                rehomed_at = time.time()
                print(f"  its share acted on again {rehomed_at - killed.killed_at:.1f} s after the kill")
        if n >= args.pods and not creating and (killed is None or rehomed_at is not None):
            break
        if time.monotonic() - last_print > 10:
            print(f"  … {n}/{args.pods} bound")
            last_print = time.monotonic()
        time.sleep(0.1)
    live = [x for x in instances if x is not killed]
    for x in live:  # every instance's Events sent, then every one read at the same moment
        x.ask("flush")
    ended = {x.identity: x.ask("status") for x in live}
    finals = {}
    for x in instances:
        if x is killed:
            finals[x.identity] = {**x.last, "cpu_s": cpu_at_kill[x.identity]}
        else:
            finals[x.identity] = x.ask("stop")
    events_done = time.time()
    server = api.ask("results")
    figures = _figures_common(args, server, started_wall, events_done, 0.0, cluster)
    per = {}
    for x in instances:
        f = finals[x.identity]
        cpu = max(1e-9, f["cpu_s"] - cpu0[x.identity])
        per[x.identity] = {"pods_bound": f["placed"], "cpu_s": round(cpu, 1),
                           "pods_per_cpu_s": round(f["placed"] / cpu, 1), "decided": f.get("decided"),
                           "killed": x is killed, "phase_s": f.get("phase_s"),
                           "thread_cpu_s": {k: round(v - threads0[x.identity].get(k, 0.0), 2)
                                            for k, v in (f.get("threads") or {}).items()},
                           "work": f.get("work"), "work_in_window": _work_since(work0[x.identity], f.get("work") or {})}
        e = ended.get(x.identity)  # its pods were all bound then; its count of them is complete at stop
        if e is not None:
            cpu_end = max(1e-9, e["cpu_s"] - cpu0[x.identity])
            per[x.identity].update(cpu_s_at_end=round(cpu_end, 1), pods_per_cpu_s_at_end=round(f["placed"] / cpu_end, 1),
                                   thread_cpu_s_at_end={k: round(v - threads0[x.identity].get(k, 0.0), 2)
                                                        for k, v in (e.get("threads") or {}).items()},
                                   work_at_end=e.get("work"))
    figures["shards"] = args.shards
    figures["instances"] = per
    rates = [v["pods_per_cpu_s"] for v in per.values() if not v["killed"]]
    figures["per_instance_pods_per_cpu_s_mean"] = round(float(np.mean(rates)), 1) if rates else None
    figures["scheduler_cpu_s_total"] = round(sum(v["cpu_s"] for v in per.values()), 1)
    figures["pods_bound_per_scheduler_cpu_s"] = round(figures["pods_bound"] / max(1e-9, figures["scheduler_cpu_s_total"]), 1)
    if killed is not None and rehomed_at is not None:
        figures["reassignment_s"] = round(rehomed_at - killed.killed_at, 2)
        figures["reassignment_after_expiry_s"] = round(rehomed_at - killed.killed_at - args.lease_duration, 2)
    else:
        figures["reassignment_s"] = None
    return figures


def _work_since(before: dict, after: dict) -> dict:
    """What an instance did inside the measured window: ``after`` less ``before`` (counts only)."""
    applied = {kind: {o: n - ((before.get("applied") or {}).get(kind) or {}).get(o, 0) for o, n in outcomes.items()}
               for kind, outcomes in (after.get("applied") or {}).items()}
    out = {k: v - (before.get(k) or 0) for k, v in after.items() if isinstance(v, int) and k != "vnodes"}
    out["applied"] = {kind: {o: n for o, n in outcomes.items() if n} for kind, outcomes in applied.items()
                      if any(outcomes.values())}
    return out


def table(figures: dict) -> str:
    """The per-instance table printed after the figures."""
    lines = [f"  {'instance':<12} {'bound':>7} {'cpu s':>7} {'pods/cpu s':>11} {'own':>7} {'spill':>6}"]
    for name, v in figures["instances"].items():
        d = v.get("decided") or {}
        lines.append(f"  {name:<12} {v['pods_bound']:>7} {v['cpu_s']:>7} {v['pods_per_cpu_s']:>11} "
                     f"{d.get('own', 0):>7} {d.get('spill', 0):>6}{'  (killed)' if v['killed'] else ''}")
        top = sorted((v.get("thread_cpu_s") or {}).items(), key=lambda kv: -kv[1])[:6]
        if top:
            lines.append("      cpu s by thread: " + ", ".join(f"{k} {t:g}" for k, t in top))
        if "cpu_s_at_end" in v:
            lines.append(f"      at the end (every instance read at once, before any stop): cpu s {v['cpu_s_at_end']}, "
                         f"pods/cpu s {v['pods_per_cpu_s_at_end']}")
        w = v.get("work_in_window") or v.get("work") or {}
        if w:
            applied = ", ".join(f"{kind} {sum(o.values())}" for kind, o in sorted((w.get("applied") or {}).items()))
            lines.append(f"      work in the window: {w.get('passes')} passes, {w.get('syncs')} syncs, "
                         f"{w.get('moves')} moves, {w.get('batches')} reconciler batches, {w.get('lists')} lists, "
                         f"{w.get('expired')} 410s, {w.get('reconnects')} reconnects, "
                         f"{w.get('stale_bindings')} stale; applied: {applied}")
    return "\n".join(lines)
