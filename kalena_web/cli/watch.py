"""``kalena watch``: observe the orchestrator (docs/design.md §14) — its own process in production.

Dispatches on ``KALENA_ORCHESTRATOR``; each orchestrator adds its entry to :data:`STARTERS`
(``name → start(cluster, args) -> handle with .stop()``):

* ``kubernetes``: a candidate for the cluster's ``coordination.k8s.io`` Lease; while it leads it
  list+watches pods and nodes into the reconciler and runs the scheduling passes
  (:class:`~kalena_web.control.leading.ClusterScheduler`). ``kalena serve`` starts the same
  on a thread when ``KALENA_ORCHESTRATOR=kubernetes``. With ``--shards`` (or
  ``KALENA_WATCH_SHARDS=1``) every instance schedules a share of the cluster instead — a Lease
  per instance, nodes and pods hashed to 256 virtual nodes shared out by consistent hashing
  (:class:`~kalena_web.control.sharding.ShardedScheduler`, docs/scheduler.md "Sharding").
* ``docker`` / ``swarm``: every engine of ``KALENA_DOCKER_ENGINES`` (Swarm: also the managers'
  node and task lists) — the engines' events API, re-listed on every (re)connect — into the reconciler
  (:func:`start_docker`); ``kalena serve`` runs it on a thread when the orchestrator is docker or
  swarm (docs/docker.md).
"""

from __future__ import annotations

import argparse
import gc
import os
import signal
import socket
import threading

from kalena_engine.errors import InputError
from kalena_web.cli.persist import django_setup


def add_parser(commands: argparse._SubParsersAction) -> argparse.ArgumentParser:
    parser = commands.add_parser(
        "watch", help="watch the orchestrator and feed the control plane (KALENA_ORCHESTRATOR)",
        description="Kubernetes: list+watch pods and nodes (resourceVersion, 410 re-list, bookmarks, backoff) "
                    "into the live cluster, and schedule while holding the cluster's Lease (one scheduler per "
                    "cluster; start several for a standby). Docker/Swarm: every engine's events API (re-listed on "
                    "each reconnect) into the live cluster. Runs until SIGTERM or Ctrl-C.")
    parser.add_argument("--cluster", default="", help="live cluster to feed (default: the only live cluster)")
    parser.add_argument("--wait", action="store_true",
                        help="while there is no live cluster to feed (a fresh install) keep waiting for one, saying "
                             "what it waits for, instead of exiting (the stacks' watch service)")
    parser.add_argument("--create", action="store_true",
                        help="Docker/Swarm: create the (empty) live cluster --cluster when there is none yet — its "
                             "nodes are the engines the watch sees (a stack's first start)")
    parser.add_argument("--identity", default="", help="this candidate's name in the Lease (default host-pid)")
    parser.add_argument("--lease-namespace", default="kube-system")
    parser.add_argument("--lease-name", default="kalena-scheduler")
    parser.add_argument("--lease-duration", type=float, default=15.0, help="seconds (client-go default 15)")
    parser.add_argument("--renew-deadline", type=float, default=10.0, help="seconds (client-go default 10)")
    parser.add_argument("--retry-period", type=float, default=2.0, help="seconds (client-go default 2)")
    parser.add_argument("--request-timeout", type=float, default=10.0, help="seconds per API call")
    parser.add_argument("--shards", action="store_true",
                        help="Kubernetes: schedule a share of the cluster beside every other instance started with "
                             "--shards (a Lease per instance, kalena-shard-CLUSTER-IDENTITY in --lease-namespace; "
                             "nodes and pods hashed to 256 virtual nodes shared out by consistent hashing) instead "
                             "of one leader for the whole cluster (env KALENA_WATCH_SHARDS=1)")
    parser.set_defaults(handler=handle)
    return parser


def live_cluster_named(name: str):
    """The live cluster ``name``, or the only one when ``name`` is empty.

    Raises:
        InputError: no such cluster, or several and none named.
    """
    from kalena_web.inventory.models import Cluster

    clusters = list(Cluster.objects.filter(kind=Cluster.LIVE).order_by("name"))
    names = ", ".join(c.name for c in clusters) or "none (run `kalena cluster import`)"
    if name:
        for c in clusters:
            if c.name == name:
                return c
        raise InputError(f"no live cluster named {name!r}", field="--cluster", accepted=names)
    if len(clusters) != 1:
        raise InputError(f"{len(clusters)} live clusters", field="--cluster", accepted=f"one of {names}")
    return clusters[0]


def start_kubernetes(cluster, args: argparse.Namespace):
    """Start the Kubernetes candidate scheduler for ``cluster`` (see module doc)."""
    from django.conf import settings

    from agents.orchestrators.kubernetes import KubernetesOrchestrator
    from agents.orchestrators.kubernetes.lease import LeaderElector
    from kalena_web.control.leading import ClusterScheduler
    from kalena_web.control.orchestrators import OrchestratorNotConfigured, kubernetes_api_client

    identity = args.identity or f"{socket.gethostname()}-{os.getpid()}"
    try:
        api_client = kubernetes_api_client()
    except OrchestratorNotConfigured as exc:
        raise InputError(str(exc), field="KALENA_ORCHESTRATOR=kubernetes",
                         accepted="an in-cluster service account, KUBECONFIG or ~/.kube/config") from None
    orchestrator = KubernetesOrchestrator(api_client, request_timeout_s=args.request_timeout, identity=identity)
    if getattr(args, "shards", False) or settings.KALENA_WATCH_SHARDS:
        from kalena_web.control.sharding import ShardedScheduler
        from kalena_web.scheduling.shards import ShareMember

        member = ShareMember(orchestrator, cluster=cluster.name, identity=identity, namespace=args.lease_namespace,
                             lease_duration_s=args.lease_duration, renew_deadline_s=args.renew_deadline,
                             retry_period_s=args.retry_period)
        scheduler = ShardedScheduler(cluster=cluster, orchestrator=orchestrator, member=member)
        scheduler.start()
        return scheduler
    elector = LeaderElector(orchestrator, identity=identity, namespace=args.lease_namespace, name=args.lease_name,
                            lease_duration_s=args.lease_duration, renew_deadline_s=args.renew_deadline,
                            retry_period_s=args.retry_period)
    scheduler = ClusterScheduler(cluster=cluster, orchestrator=orchestrator, elector=elector)
    scheduler.start()
    return scheduler


def start_docker(cluster, args: argparse.Namespace):
    """Start the Docker/Swarm watcher for ``cluster``: every engine's events API into the
    reconciler on a thread (:class:`~agents.orchestrators.docker.watch.DockerWatcher`); the
    scheduling passes are the scheduling loop's (Celery beat, or ``kalena serve``'s embedded loops).
    ``args.heartbeat`` (set by ``kalena watch``, not ``kalena serve``): the applying loop refreshes
    the ``watch`` heartbeat that ``kalena probe watch`` reads (:mod:`kalena_web.control.heartbeat`)."""
    from django.conf import settings

    from kalena_web.control.heartbeat import HeartbeatTicker
    from kalena_web.control.orchestrators import docker_orchestrator
    from kalena_web.control.watching import watch_start

    beat = HeartbeatTicker("watch") if getattr(args, "heartbeat", False) else None
    return watch_start(cluster=cluster, orchestrator=docker_orchestrator(settings.KALENA_ORCHESTRATOR),
                       name=f"kalena-watch-{settings.KALENA_ORCHESTRATOR}", beat=beat)


STARTERS = {"kubernetes": start_kubernetes, "docker": start_docker, "swarm": start_docker}


def start(args: argparse.Namespace):
    """Start the watcher of ``KALENA_ORCHESTRATOR`` for the chosen cluster; returns its handle.

    Raises:
        InputError: an orchestrator without a watcher, or no such cluster.
    """
    from django.conf import settings

    kind = settings.KALENA_ORCHESTRATOR
    if kind not in STARTERS:
        raise InputError(f"KALENA_ORCHESTRATOR={kind!r} has no watcher", field="KALENA_ORCHESTRATOR",
                         accepted=", ".join(sorted(STARTERS)))
    return STARTERS[kind](live_cluster_named(args.cluster), args)


def create_if_missing(args: argparse.Namespace) -> None:
    """``--create``: the live cluster ``--cluster`` exists afterwards (created empty when missing;
    Docker and Swarm only — a Kubernetes cluster is imported).

    Raises:
        InputError: no ``--cluster``, another orchestrator, or not a cluster name.
    """
    from django.conf import settings

    from kalena_web.control.services import ClusterExists, live_cluster_create

    if not args.cluster:
        raise InputError("--create needs the cluster's name", field="--cluster", accepted="--cluster NAME --create")
    if settings.KALENA_ORCHESTRATOR not in ("docker", "swarm"):
        raise InputError(f"--create is for Docker and Swarm (KALENA_ORCHESTRATOR={settings.KALENA_ORCHESTRATOR!r})",
                         field="--create", accepted="`kalena cluster import` for a Kubernetes cluster")
    try:
        live_cluster_create(name=args.cluster)
        print(f"kalena watch: created the empty live cluster {args.cluster!r} (its nodes: the engines)", flush=True)
    except ClusterExists:
        pass


def engines_answer() -> None:
    """Docker/Swarm: every engine of ``KALENA_DOCKER_ENGINES`` answers (``GET /_ping``) before the
    watch starts — a wrong socket path or address is said at once, not as reconnect warnings.

    Raises:
        InputError: a malformed engine list, or the engines that did not answer (each with why).
    """
    from django.conf import settings

    from kalena_web.control.orchestrators import OrchestratorNotConfigured, docker_engines

    if settings.KALENA_ORCHESTRATOR not in ("docker", "swarm"):
        return
    try:
        engines = docker_engines()
    except OrchestratorNotConfigured as exc:
        raise InputError(str(exc), field="KALENA_DOCKER_ENGINES") from None
    silent = []
    for engine in engines:
        try:
            engine._call("ping", lambda c: c.ping())
        except Exception as exc:  # noqa: BLE001 - unreachable, refused, TLS: all mean "does not answer"
            silent.append(f"{engine.config.url}: {exc}")
    if silent:
        raise InputError(f"{len(silent)} of {len(engines)} engine(s) do not answer: {'; '.join(silent)}; nothing "
                         "was started or created", field="KALENA_DOCKER_ENGINES",
                         accepted="unix:///path/to/docker.sock of a running engine (mounted into this container), "
                                  "or tcp://host:2376 with TLS")
    if settings.KALENA_ORCHESTRATOR == "docker":
        node_names_unique(engines)


def node_names_unique(engines: list) -> None:
    """Standalone Docker: no two engines may get the same node name. An engine without the label
    ``kalena.naughtian.io/node`` is named by ``docker info``'s ``Name`` — the machine's hostname,
    which every engine on one host (and every cloned machine) shares — and two engines under one
    name would be one node whose containers, capacity and agent link collide.

    Raises:
        InputError: the engines that would share a name: each name, both engine URLs and how each
            was named; nothing is started or created.
    """
    from agents.orchestrators.docker.client import NODE_LABEL

    by_name: dict[str, list] = {}
    for engine in engines:
        by_name.setdefault(engine.node, []).append(engine)
    clashes = [f"node {name!r}: " + " and ".join(f"{e.config.url} (named by {e.named_by})" for e in group)
               for name, group in by_name.items() if len(group) > 1]
    if clashes:
        raise InputError(f"{len(clashes)} node name(s) given to more than one engine — {'; '.join(clashes)}; "
                         f"set the node label on each engine (`dockerd --label {NODE_LABEL}=NAME`, or "
                         f"\"labels\": [\"{NODE_LABEL}=NAME\"] in daemon.json) or name it in the list "
                         f"(KALENA_DOCKER_ENGINES=NAME=unix:///…); nothing was started or created",
                         field="KALENA_DOCKER_ENGINES", accepted="one distinct node name per engine")


def startup_frozen() -> int:
    """Move what the process made while it started (Django, the modules, the settings) out of
    the garbage collector's sight (:func:`gc.freeze`, after one collection): the full
    collections of a long-running ``kalena watch`` or ``kalena serve`` then scan only what it made
    since. Measured with ``kalena bench kubernetes --shards 3``: each full collection scanned some
    200,000 objects of the start and cost about 0.1 s of CPU, taken from whichever thread
    allocated at that moment. Returns how many objects were frozen."""
    gc.collect()
    gc.freeze()
    return gc.get_freeze_count()


def handle(args: argparse.Namespace) -> int:
    django_setup()
    args.heartbeat = True   # Docker/Swarm: `kalena probe watch` (the stacks' health check) reads it
    engines_answer()
    startup_frozen()
    if getattr(args, "create", False):
        create_if_missing(args)
    if getattr(args, "wait", False):
        handle_ = WaitingWatch(args, say=lambda line: print(line.replace("kalena serve:", "kalena watch:"),
                                                            flush=True)).start()
    else:
        handle_ = start(args)
    print(f"kalena watch: watching for cluster {args.cluster or '(the only live cluster)'}; Ctrl-C to stop",
          flush=True)
    done = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: done.set())
    try:
        done.wait()
    except KeyboardInterrupt:
        pass
    handle_.stop()
    return 0


def defaults(cluster: str = "") -> argparse.Namespace:
    """The arguments ``kalena serve`` starts its watch thread with (``cluster``: its ``--cluster``)."""
    parser = argparse.ArgumentParser()
    add_parser(parser.add_subparsers())
    return parser.parse_args(["watch", *(["--cluster", cluster] if cluster else [])])


IMPORT_HINT = ("import one with `kalena cluster import NAME --infra INFRA.yaml --workloads WORKLOADS.yaml "
               "--blueprint SOLUTION.yaml` (or `--manifests PATH` for a cluster's own Kubernetes objects)")


def waiting_for(name: str) -> str:
    """What ``kalena serve`` says while its watch waits for a live cluster to feed: none yet (and
    how to import one), ``name`` not there, or several and none named (and how to name one)."""
    from kalena_web.inventory.models import Cluster

    names = list(Cluster.objects.filter(kind=Cluster.LIVE).order_by("name").values_list("name", flat=True))
    if not names:
        return f"no live cluster yet: the console serves and the watch waits; {IMPORT_HINT}"
    if name:
        return (f"no live cluster named {name!r} (there are: {', '.join(names)}): the watch waits; "
                f"{IMPORT_HINT.replace('NAME', name)}")
    return (f"{len(names)} live clusters ({', '.join(names)}): the console serves them all, the watch feeds one; "
            f"restart with `kalena serve --cluster NAME` to choose it")


class WaitingWatch:
    """``kalena serve``'s watch: started as soon as the live cluster it feeds exists (the only
    one, or ``args.cluster``), so a fresh install — no cluster yet — or one with several serves
    the console instead of exiting; until then a thread looks again every ``poll_s`` seconds
    and ``say`` s once per change what it waits for and what to do next (:func:`waiting_for`).
    A watcher that cannot start (no Kubernetes credentials) is said and tried again likewise.
    ``handle``: the started watcher (None while waiting); :meth:`stop` stops either."""

    def __init__(self, args: argparse.Namespace, *, poll_s: float = 2.0, say=print) -> None:
        self.args, self.poll_s, self.say = args, poll_s, say
        self.handle = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="kalena-watch-waiting", daemon=True)

    def start(self) -> WaitingWatch:
        self._thread.start()
        return self

    def _run(self) -> None:
        from django.conf import settings
        from django.db import DatabaseError, close_old_connections

        from kalena_web.control.orchestrators import OrchestratorNotConfigured

        told = ""
        while not self._stop.is_set():
            close_old_connections()
            try:
                cluster = live_cluster_named(self.args.cluster)
                handle = STARTERS[settings.KALENA_ORCHESTRATOR](cluster, self.args)
            except (InputError, DatabaseError, OrchestratorNotConfigured) as exc:
                try:
                    news = waiting_for(self.args.cluster) if isinstance(exc, InputError) and \
                        exc.field == "--cluster" else f"the watch cannot start yet: {exc}"
                except DatabaseError as again:
                    news = f"the watch cannot start yet: {again}"
                if news != told:
                    self.say(f"kalena serve: {news}")
                    told = news
                self._stop.wait(self.poll_s)
                continue
            if self._stop.is_set():
                handle.stop()
                return
            self.handle = handle
            self.say(f"kalena serve: {settings.KALENA_ORCHESTRATOR} watch running for live cluster {cluster.name!r}")
            return

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=30.0)
        if self.handle is not None:
            self.handle.stop()
