"""The only module that calls a Docker engine: engines as nodes (standalone Docker) and Swarm.

Standalone: each engine of a list (unix sockets, or TCP with TLS — :class:`EngineConfig`) is one
node, named by configuration or by the engine (``docker info`` ``Name``). Kalena starts a batch
container itself (there is no admission check), named per attempt so that a re-placement never
collides with the stopped container it replaces, with the labels of
:mod:`agents.orchestrators.docker.labels` (identity, tier, priority, request), its cpu and memory
limits, ``cpu_shares`` and ``mem_reservation`` from its request, ``init`` and its stop grace.

Swarm: one replicated service (1 replica) per batch pod with Limits and no Reservations (Swarm's
scheduler would refuse what it thinks is full; Kalena's ledger holds the request), a
``node.id`` constraint, ``container_labels`` carrying the tier (the node agent reads the
container), restart condition none and the pod's stop grace.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

import docker
import requests
from docker.errors import APIError, DockerException, NotFound
from docker.types import EndpointSpec, Resources, RestartPolicy

from agents.discovery.labels import GRACE
from agents.errors import DiscoveryError
from agents.orchestrators.base import (
    ID_LABEL, BatchSpec, OrchestratorError, StaleBinding, WorkloadGone, WorkloadRef, priority_of, tier_of,
)
from agents.orchestrators.docker.labels import (
    ATTEMPT, ATTEMPT_ENV, container_name, cpu_shares_from_mcpu, labels_for,
)
from agents.orchestrators.docker.engines import EngineConfig
from agents.orchestrators.docker.swarm import WAITING, node_name
from agents.orchestrators.events import NodeSeen, WatchEvent
from agents.units import parse_k8s_quantity

CFS_PERIOD_US = 100_000
NODE_LABEL = "kalena.naughtian.io/node"   # an engine's node name (``dockerd --label``)
ALLOCATABLE_CPU = "kalena.naughtian.io/allocatable-cpu"
ALLOCATABLE_MEMORY = "kalena.naughtian.io/allocatable-memory"
#: Kubernetes' default ``terminationGracePeriodSeconds``: a pod's stop grace when none is labelled.
DEFAULT_GRACE_S = 30.0
log = logging.getLogger(__name__)


class EngineUnreachable(OrchestratorError):
    """The engine did not answer (socket missing, TLS refused, timeout); its node is not ready."""


class Engine:
    """One Docker engine (a node). Every call raises :class:`EngineUnreachable` when the engine
    does not answer, :class:`OrchestratorError` when it refuses."""

    def __init__(self, config: EngineConfig, *, client: docker.DockerClient | None = None) -> None:
        self.config = config
        self._client = client
        self._name = config.node
        self.named_by = "KALENA_DOCKER_ENGINES" if config.node else ""   # where :attr:`node` came from

    @classmethod
    def of_client(cls, client: docker.DockerClient) -> Engine:
        return cls(EngineConfig(url=str(client.api.base_url)), client=client)

    @property
    def client(self) -> docker.DockerClient:
        if self._client is None:
            tls: Any = False
            if self.config.url.startswith("tcp://") and (self.config.tls_cert or self.config.tls_ca):
                tls = docker.tls.TLSConfig(
                    client_cert=(self.config.tls_cert, self.config.tls_key) if self.config.tls_cert else None,
                    ca_cert=self.config.tls_ca or None, verify=self.config.tls_ca if self.config.tls_verify else False)
            try:
                self._client = docker.DockerClient(base_url=self.config.url, tls=tls, timeout=int(self.config.timeout_s))
            except DockerException as exc:
                raise EngineUnreachable(f"engine {self.config.url}: {exc}") from None
        return self._client

    @property
    def node(self) -> str:
        """The node name (asked once): configuration, else the engine's label
        ``kalena.naughtian.io/node`` (``dockerd --label``), else its ``Name`` — the rule the node
        agent's ``--node-name-from-engine`` follows too. :attr:`named_by` says which
        (``KALENA_DOCKER_ENGINES``, ``label``, ``docker info Name``, ``URL``)."""
        if not self._name:
            info = self._call("info", lambda c: c.info())
            labels = dict(x.split("=", 1) for x in info.get("Labels") or [] if "=" in x)
            label, name = labels.get(NODE_LABEL), info.get("Name")
            self.named_by = "label" if label else "docker info Name" if name else "URL"
            self._name = str(label or name or self.config.url)
        return self._name

    def _call(self, what: str, fn):  # type: ignore[no-untyped-def]
        try:
            return fn(self.client)
        except NotFound:
            raise
        except APIError as exc:
            if exc.status_code is not None and exc.status_code < 500:
                raise
            raise OrchestratorError(f"engine {self.config.url} ({self._name or '?'}) {what}: "
                                    f"{exc.explanation or exc}") from None
        except (DockerException, OSError) as exc:
            raise EngineUnreachable(f"engine {self.config.url} ({self._name or '?'}) {what}: {exc}") from None
        except requests.exceptions.RequestException as exc:  # connection refused, reset, timeout
            raise EngineUnreachable(f"engine {self.config.url} ({self._name or '?'}) {what}: "
                                    f"{type(exc).__name__}: {exc}") from None

    def node_seen(self, *, at_s: float) -> NodeSeen:
        """The engine as a node: ready, allocatable cpu (``NCPU`` × 1000 mcpu) and memory
        (``MemTotal`` bytes) — or the engine labels ``kalena.naughtian.io/allocatable-cpu`` /
        ``allocatable-memory`` (quantities, set with ``dockerd --label``) where the engine's
        share of the host is smaller (a cpuset) — its labels and its images with their sizes
        (:func:`image_sizes`: image locality weighs a cached image by its size)."""
        info = self._call("info", lambda c: c.info())
        images = self._call("images", lambda c: c.images.list())
        labels = {}
        for item in info.get("Labels") or []:
            key, _, value = str(item).partition("=")
            labels[key] = value
        cpu_mcpu = float(info.get("NCPU") or 0) * 1000.0
        memory_bytes = float(info.get("MemTotal") or 0)
        try:
            if ALLOCATABLE_CPU in labels:
                cpu_mcpu = parse_k8s_quantity(labels[ALLOCATABLE_CPU], source=self.node, field=ALLOCATABLE_CPU) * 1000.0
            if ALLOCATABLE_MEMORY in labels:
                memory_bytes = parse_k8s_quantity(labels[ALLOCATABLE_MEMORY], source=self.node, field=ALLOCATABLE_MEMORY)
        except DiscoveryError as exc:
            log.warning("engine %s: %s; the engine's own figures are used", self.node, exc)
        allocatable = (cpu_mcpu, memory_bytes, 0.0, float("inf"), float("inf"), float("inf"), float("inf"),
                       float("inf"))
        sizes = image_sizes(image.attrs for image in images)
        return NodeSeen(name=self.node, ready=True, schedulable=True, allocatable=allocatable, labels=labels,
                        images=tuple(sorted(sizes)), at_s=at_s, image_bytes=sizes)

    def ping(self) -> None:
        self._call("ping", lambda c: c.ping())

    def engine_time_s(self) -> float:
        """The engine's clock (``SystemTime``), Unix seconds: where an events stream starts."""
        from agents.units import unix_s_from_rfc3339

        text = self._call("info", lambda c: c.info()).get("SystemTime", "")
        try:
            return unix_s_from_rfc3339(text, source=self.config.url, field="SystemTime")
        except Exception:  # noqa: BLE001 - an engine without SystemTime: our clock
            return time.time()

    def all_containers(self) -> list[dict[str, Any]]:
        """Inspect data of every container (any state): the watcher's re-list."""
        return [c.attrs for c in self.containers()]

    def inspect(self, container_id: str) -> dict[str, Any] | None:
        """One container's inspect data, None when it is gone."""
        try:
            return self._call("inspect", lambda c: c.containers.get(container_id)).attrs
        except NotFound:
            return None

    def kalena_containers(self, ref: str | None = None) -> list[dict[str, Any]]:
        """Inspect data of every container (any state) carrying Kalena's workload label
        (``ref``: only that pod's)."""
        label = f"{ID_LABEL}={ref}" if ref else ID_LABEL
        return [c.attrs for c in self.containers(label=label)]

    def containers(self, *, label: str = "", running_only: bool = False) -> list[Any]:
        """Containers (any state, or running only), each inspected (``.attrs``); ``label``
        (``key`` or ``key=value``) narrows them. A container removed between the engine's list
        and its inspect is left out (it is gone: the events stream says so), never an error."""
        filters = {"label": label} if label else None
        return self._call("list", lambda c: c.containers.list(all=not running_only, filters=filters,
                                                              ignore_removed=True))

    def events(self, *, since_s: float) -> Iterator[dict[str, Any]]:
        """The engine's container events from ``since_s`` on (a blocking stream; it ends when
        the engine goes away — the caller re-lists and reconnects)."""
        stream = self._call("events", lambda c: c.events(since=since_s, decode=True, filters={"type": "container"}))
        self._stream = stream
        try:
            yield from stream
        except Exception as exc:  # noqa: BLE001 - the connection dropped mid-stream
            raise EngineUnreachable(f"engine {self.config.url} ({self._name or '?'}) events: {exc}") from None

    def close_stream(self) -> None:
        stream = getattr(self, "_stream", None)
        if stream is not None:
            try:
                stream.close()
            except Exception:  # noqa: BLE001 - already closed
                pass

    def run(self, spec: BatchSpec, *, attempt: int) -> str:
        """Start ``spec``'s container (attempt ``attempt``); returns its id."""
        grace_s = grace_of(spec)
        options: dict[str, Any] = {"cpu_shares": cpu_shares_from_mcpu(spec.request_mcpu)}
        if spec.limit_mcpu > 0:
            options.update(cpu_period=CFS_PERIOD_US, cpu_quota=int(spec.limit_mcpu / 1000 * CFS_PERIOD_US))
        if spec.limit_bytes > 0:
            options["mem_limit"] = int(spec.limit_bytes)
        if spec.request_bytes > 0:
            options["mem_reservation"] = int(min(spec.request_bytes, spec.limit_bytes or spec.request_bytes))
        name = container_name(spec.id, attempt)
        container = self._call("run", lambda c: c.containers.run(
            spec.image, list(spec.command) or None, name=name, labels=labels_for(spec, attempt=attempt, grace_s=grace_s),
            detach=True, init=True, network_mode="none", stop_signal="SIGTERM",
            restart_policy={"Name": "no"}, environment={ATTEMPT_ENV: str(attempt)}, **options))
        return str(container.id)

    def stop_and_remove(self, container_id: str, *, grace_s: float) -> None:
        """SIGTERM, ``grace_s``, SIGKILL (``docker stop``), then remove; gone already is fine."""
        try:
            container = self._call("get", lambda c: c.containers.get(container_id))
            if container.status in ("running", "restarting", "paused"):
                self._call("stop", lambda c: container.stop(timeout=max(0, int(round(grace_s)))))
            self._call("remove", lambda c: container.remove(force=True))
        except NotFound:
            return
        except APIError as exc:
            if exc.status_code == 409:  # removal already in progress
                return
            raise OrchestratorError(f"engine {self.node}: stop {container_id[:12]}: {exc.explanation or exc}") from None


def image_sizes(images: Iterable[Mapping[str, Any]]) -> dict[str, float]:
    """Image name → size in bytes from an engine's image list (``GET /images/json``: each
    image's ``RepoTags`` and ``Size``), for image locality (kube-scheduler's ImageLocality weighs
    a cached image by its size; Kubernetes reports it as ``status.images[].sizeBytes``).

    Each tag is given as the engine lists it (``kalena/busybox:test``) and fully qualified
    (``docker.io/kalena/busybox:test``, :func:`~agents.orchestrators.kubernetes.objects.normalize_image`),
    so a pod's image matches however it was written. Untagged images (``<none>:<none>``) are
    left out: no pod names them. Example: ``[{"RepoTags": ["busybox:1.36"], "Size": 4261550}]``
    → ``{"busybox:1.36": 4261550.0, "docker.io/library/busybox:1.36": 4261550.0}``.
    """
    from agents.orchestrators.kubernetes.objects import normalize_image

    out: dict[str, float] = {}
    for image in images:
        try:
            size = max(0.0, float(image.get("Size") or 0))
        except (TypeError, ValueError):
            size = 0.0
        for tag in image.get("RepoTags") or []:
            tag = str(tag)
            if not tag or tag.startswith("<none>"):
                continue
            for name in (tag, normalize_image(tag)):
                out[name] = max(out.get(name, 0.0), size)
    return out


def grace_of(spec: BatchSpec) -> float:
    """The pod's stop grace: its ``termination-grace-seconds`` label where it has one, else
    ``spec.grace_s`` (the pod's, default 30 s as Kubernetes)."""
    try:
        value = float(spec.labels.get(GRACE, spec.grace_s))
    except (TypeError, ValueError):
        value = spec.grace_s
    return value if value >= 0 else DEFAULT_GRACE_S


def _attempt(attrs: Mapping[str, Any]) -> int:
    try:
        return int(((attrs.get("Config") or {}).get("Labels") or {}).get(ATTEMPT, "0"))
    except ValueError:
        return 0


def _running(attrs: Mapping[str, Any]) -> bool:
    return (attrs.get("State") or {}).get("Status") in ("running", "restarting", "paused", "created")


class DockerOrchestrator:
    """Standalone Docker: every engine of the list is a node (see module doc).

    Args:
        engines: the engines (or one ``docker.DockerClient``, a one-node cluster).
    """

    def __init__(self, engines: Sequence[Engine] | docker.DockerClient) -> None:
        if isinstance(engines, docker.DockerClient):
            engines = [Engine.of_client(engines)]
        self.engines = list(engines)
        if not self.engines:
            raise OrchestratorError("docker: no engines configured (KALENA_DOCKER_ENGINES)")

    @property
    def node(self) -> str:
        """The first engine's node (one-engine clusters)."""
        return self.engines[0].node

    def engine(self, node: str) -> Engine:
        for engine in self.engines:
            try:
                if engine.node == node:
                    return engine
            except OrchestratorError:
                continue
        raise StaleBinding(f"node {node!r} is not one of the configured engines")

    def _reachable(self) -> Iterator[Engine]:
        for engine in self.engines:
            try:
                engine.ping()
            except OrchestratorError as exc:
                log.warning("docker: %s", exc)
                continue
            yield engine

    def nodes(self) -> list[str]:
        """Nodes whose engine answers now (an unreachable engine's node takes no batch)."""
        return [e.node for e in self._reachable()]

    def workloads(self, node: str | None = None) -> list[WorkloadRef]:
        out = []
        for engine in self._reachable():
            if node is not None and engine.node != node:
                continue
            for c in engine.containers(running_only=True):
                labels = c.labels or {}
                out.append(WorkloadRef(id=labels.get(ID_LABEL, c.name), node=engine.node, tier=tier_of(labels),
                                       priority=priority_of(labels), phase="Running"))
        return out

    def bind(self, spec: BatchSpec, node: str) -> None:
        """Start ``spec`` on ``node``'s engine as attempt ``max(spec.attempt, last seen + 1)``.

        Earlier attempts' containers on every reachable engine are removed first (a stopped one
        is left from an eviction; a running one is a stale copy of a pod now pending).

        Raises:
            StaleBinding: the node is unknown or unreachable, or a copy of the same or a later
                attempt is running (already bound).
            OrchestratorError: the engine refused (image missing, bad limits).
        """
        target = self.engine(node)
        try:
            target.ping()
        except OrchestratorError as exc:
            raise StaleBinding(f"bind {spec.id}: node {node!r} is unreachable ({exc})") from None
        attempt = int(spec.attempt)
        for engine in self._reachable():
            for attrs in engine.kalena_containers(spec.id):
                seen = _attempt(attrs)
                if _running(attrs) and seen >= spec.attempt:
                    raise StaleBinding(f"bind {spec.id}: already running on {engine.node} "
                                       f"({attrs.get('Name', '').lstrip('/')})")
                attempt = max(attempt, seen + 1)
                engine.stop_and_remove(attrs["Id"], grace_s=0 if not _running(attrs) else grace_of(spec))
        try:
            target.run(spec, attempt=attempt)
        except APIError as exc:
            if exc.status_code == 409:
                raise StaleBinding(f"bind {spec.id}: container {container_name(spec.id, attempt)} exists on "
                                   f"{node}") from None
            raise OrchestratorError(f"bind {spec.id} on {node}: {exc.explanation or exc}") from None

    def watch(self, stop: threading.Event) -> Iterator[WatchEvent]:
        """The engines' events as watch events (:class:`~agents.orchestrators.docker.watch.DockerWatcher`)."""
        from agents.orchestrators.docker.watch import DockerWatcher

        yield from DockerWatcher(self.engines).events(stop)

    def evict(self, workload_id: str, *, grace_s: float, reason: str) -> None:
        """Stop and remove every container of ``workload_id`` (SIGTERM, ``grace_s``, SIGKILL).

        Raises:
            WorkloadGone: no running container of it on any reachable engine.
        """
        found = False
        for engine in self._reachable():
            for attrs in engine.kalena_containers(workload_id):
                found = found or _running(attrs)
                engine.stop_and_remove(attrs["Id"], grace_s=grace_s)
        if not found:
            raise WorkloadGone(f"evict {workload_id} ({reason}): no running container of it on any engine")


class SwarmOrchestrator:
    """Docker Swarm through its managers (see module doc). ``publish`` is unused: batch
    services get no ports (no routing mesh here) and ``dnsrr`` endpoints.

    Args:
        client: the first manager's engine (or client): asked first for nodes, services and tasks.
        engines: every node engine Kalena can reach (managers and workers; the first manager may
            be among them): a manager that answers stands in when the first does not, and the
            watcher follows each engine's own container events where it can reach it.

    A node is named by its label ``kalena.naughtian.io/node`` (the Swarm node's label, else the
    engine's ``dockerd --label``), else by its Swarm node ID — never by hostname, which several
    nodes may share (:func:`~agents.orchestrators.docker.swarm.node_name`).
    """

    def __init__(self, client: docker.DockerClient | Engine, *, engines: Sequence[Engine] = (),
                 lost_after_s: float | None = None, reschedule_nodes_per_s: float | None = None) -> None:
        #: the watcher's node-loss grace and rescheduling rate (None: Lifecycle's defaults, docs/design.md §14)
        self.lost_after_s, self.reschedule_nodes_per_s = lost_after_s, reschedule_nodes_per_s
        self.engine = client if isinstance(client, Engine) else Engine.of_client(client)
        self.client = self.engine.client
        self.engines = [self.engine] + [e for e in engines if e.config.url != self.engine.config.url]

    def manager_call(self, what: str, fn):  # type: ignore[no-untyped-def]
        """``fn(client)`` on the first engine that answers as a manager (the first manager first).

        Raises:
            EngineUnreachable, OrchestratorError: no engine answered as a manager (the last error).
        """
        error: OrchestratorError | None = None
        for engine in self.engines:
            try:
                result = engine._call(what, fn)
            except OrchestratorError as exc:  # a worker answers 503 "not a swarm manager"; a dead one not at all
                error = exc
                continue
            if engine is not self.engines[0]:  # ask the one that answered first next time
                self.engines.remove(engine)
                self.engines.insert(0, engine)
                self.engine, self.client = engine, engine.client
            return result
        raise error or OrchestratorError(f"swarm: {what}: no manager configured")

    def node_list(self) -> list[dict[str, Any]]:
        """Every Swarm node's JSON (``GET /nodes``), as a manager reports it."""
        return [n.attrs for n in self.manager_call("nodes", lambda c: c.nodes.list())]

    _nodes = node_list

    def nodes(self) -> list[str]:
        """Names of nodes that are ready and active (Kalena places batch there)."""
        return [node_name(n) for n in self.node_list()
                if n["Status"]["State"] == "ready" and n["Spec"].get("Availability") == "active"]

    def node_ids(self) -> dict[str, str]:
        """Node name → Swarm node id."""
        return {node_name(n): n["ID"] for n in self.node_list()}

    def services(self) -> list[dict[str, Any]]:
        """Every Kalena batch service's spec with its tasks (``"Tasks"``), from one manager."""
        def listed(c: docker.DockerClient) -> list[dict[str, Any]]:
            out = []
            for service in c.services.list(filters={"label": ID_LABEL}):
                attrs = dict(service.attrs)
                try:
                    attrs["Tasks"] = service.tasks()
                except NotFound:  # removed between the list and its tasks
                    continue
                out.append(attrs)
            return out

        return self.manager_call("services", listed)

    def workloads(self, node: str | None = None) -> list[WorkloadRef]:
        hostnames = {v: k for k, v in self.node_ids().items()}
        out = []
        for service in self.manager_call("services", lambda c: c.services.list()):
            labels = service.attrs["Spec"].get("Labels") or {}
            tasks = [t for t in service.tasks() if t.get("DesiredState") == "running"]
            where = hostnames.get(tasks[0].get("NodeID", ""), "") if tasks else ""
            if node is not None and where != node:
                continue
            out.append(WorkloadRef(id=labels.get(ID_LABEL, service.name), node=where, tier=tier_of(labels),
                                   priority=priority_of(labels),
                                   phase=tasks[0]["Status"]["State"] if tasks else "Pending"))
        return out

    def bind(self, spec: BatchSpec, node: str) -> None:
        """Create ``spec``'s service pinned to ``node`` by ``node.id``; an earlier attempt's
        service (ended, or a stale copy) is removed first.

        Raises:
            StaleBinding: ``node`` is not a ready active Swarm node, or the pod's service of the
                same or a later attempt exists.
            OrchestratorError: the manager refused.
        """
        ids = self.node_ids()
        if node not in self.nodes() or node not in ids:
            raise StaleBinding(f"bind {spec.id}: node {node!r} is not a ready swarm node")
        attempt = int(spec.attempt)
        for service in self.manager_call("services", lambda c: c.services.list(filters={"label": f"{ID_LABEL}={spec.id}"})):
            seen = int((service.attrs["Spec"].get("Labels") or {}).get(ATTEMPT, "0") or 0)
            if seen >= spec.attempt and any(t.get("DesiredState") in ("running", "ready") and t["Status"]["State"] in
                                            WAITING | {"running"} for t in service.tasks()):
                raise StaleBinding(f"bind {spec.id}: service {service.name} is already placed")
            attempt = max(attempt, seen + 1)
            self._remove(service)
        grace_s = grace_of(spec)
        labels = labels_for(spec, attempt=attempt, grace_s=grace_s)
        resources = Resources(cpu_limit=int(spec.limit_mcpu * 1e6) or None, mem_limit=int(spec.limit_bytes) or None)
        try:
            self.manager_call("create", lambda c: c.services.create(
                spec.image, command=list(spec.command) or None, name=container_name(spec.id, attempt), labels=labels,
                container_labels=labels, env=[f"{ATTEMPT_ENV}={attempt}"], constraints=[f"node.id=={ids[node]}"],
                resources=resources,
                restart_policy=RestartPolicy(condition="none"), stop_grace_period=int(grace_s * 1e9),
                stop_signal="SIGTERM", init=True, endpoint_spec=EndpointSpec(mode="dnsrr")))
        except APIError as exc:
            if exc.status_code == 409:
                raise StaleBinding(f"bind {spec.id}: service {container_name(spec.id, attempt)} exists") from None
            raise OrchestratorError(f"bind {spec.id}: {exc.explanation or exc}") from None

    def update_limits(self, workload_id: str, *, limit_mcpu: float, limit_bytes: float) -> None:
        """Change a batch service's Limits with the spec version it was read at (Swarm refuses an
        update against an older version: read again and retry once)."""
        for _ in range(2):
            services = self.manager_call("services", lambda c: c.services.list(
                filters={"label": f"{ID_LABEL}={workload_id}"}))
            if not services:
                raise WorkloadGone(f"update {workload_id}: no such service")
            service = max(services, key=lambda s: int((s.attrs["Spec"].get("Labels") or {}).get(ATTEMPT, "0") or 0))
            try:
                service.update(resources=Resources(cpu_limit=int(limit_mcpu * 1e6) or None,
                                                   mem_limit=int(limit_bytes) or None))
                return
            except APIError as exc:
                if "update out of sequence" not in str(exc.explanation or exc):
                    raise OrchestratorError(f"update {workload_id}: {exc.explanation or exc}") from None
        raise OrchestratorError(f"update {workload_id}: the service kept changing (update out of sequence)")

    def remove_service(self, service_id: str) -> None:
        """Remove one service by id through a manager (Swarm stops its task); gone already is fine."""
        try:
            self.manager_call("remove", lambda c: c.api.remove_service(service_id))
        except NotFound:
            pass

    def _remove(self, service: Any) -> None:
        try:
            service.remove()
        except NotFound:
            pass

    def watch(self, stop: threading.Event) -> Iterator[WatchEvent]:
        """Every node's lifecycle: the managers' node and task lists, and each reachable engine's
        container events (:class:`~agents.orchestrators.docker.swarm_watch.SwarmWatcher`)."""
        from agents.orchestrators.docker.swarm_watch import SwarmWatcher

        options = {k: v for k, v in (("lost_after_s", self.lost_after_s),
                                     ("reschedule_nodes_per_s", self.reschedule_nodes_per_s)) if v is not None}
        yield from SwarmWatcher(self, **options).events(stop)

    def evict(self, workload_id: str, *, grace_s: float, reason: str) -> None:
        """Remove the pod's services (Swarm stops the task: SIGTERM, its stop grace, SIGKILL)."""
        services = self.manager_call("services", lambda c: c.services.list(filters={"label": f"{ID_LABEL}={workload_id}"}))
        if not services:
            raise WorkloadGone(f"evict {workload_id} ({reason}): no such service")
        for service in services:
            self._remove(service)

