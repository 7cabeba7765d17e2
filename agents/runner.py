"""Builds the agent from an :class:`~agents.config.AgentConfig` and runs it until SIGTERM/SIGINT.

Threads: the mitigation loop owns the main thread and waits in one ``poll()`` on every pressure
source with a timeout until the next tick; the link client runs on its own thread and reads the
on-disk buffer the loop appends to. Nothing the loop does waits on the network.
"""

from __future__ import annotations

import json
import logging
import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import docker

from agents import __version__
from agents.cgroups.backend import detect
from agents.collectors.cadvisor import CadvisorCollector
from agents.collectors.cgroup import CgroupCollector, NodeCollector
from agents.collectors.docker_stats import DockerStatsCollector
from agents.collectors.kubelet import KubeletClient, KubeletTelemetry
from agents.collectors.telemetry import CgroupTelemetry, Telemetry
from agents.config import AgentConfig
from agents.discovery.base import WorkloadSource
from agents.discovery.docker import DockerSource
from agents.discovery.files import FileSource
from agents.discovery.kubelet import KubeletSource
from agents.enforcer import Enforcer, kube_api_client
from agents.errors import ConfigError, FacilityUnavailable
from agents.health import AgentMetrics, HealthServer
from agents.link import protocol
from agents.link.buffer import LinkBuffer
from agents.link.client import LinkClient
from agents.loop import MitigationLoop
from agents.pressure.arming import SignalArming
from agents.pressure.monitor import PressureMonitor
from agents.settings import LoopSettings

log = logging.getLogger("kalena.agent")


class Agent:
    """A fully wired agent (built by :func:`build_agent`)."""

    def __init__(self, config: AgentConfig, loop: MitigationLoop, monitor: PressureMonitor,
                 buffer: LinkBuffer | None, link: LinkClient | None, metrics: AgentMetrics | None = None) -> None:
        self.config = config
        self.metrics = metrics or AgentMetrics()
        self.loop = loop
        self.monitor = monitor
        self.buffer = buffer
        self.link = link
        self._stop = False

    def stop(self, *_: Any) -> None:
        self._stop = True
        self.monitor.wake()

    def hello(self) -> dict[str, Any]:
        return protocol.hello_message(
            node=self.config.node_name, agent_version=__version__, sampling_interval_s=self.config.sampling_interval_s,
            cgroup_version=self.loop.fs.version,
            signal_sources=self.loop.arming.in_use if self.loop.arming else {"cpu": ["poll"], "memory": ["poll"]},
            trigger_window_s=self.config.psi_window_s, capacity=self.config.capacity,
            buffered=self.buffer.count() if self.buffer else 0, ts=time.time(),
            policy_version=self.loop.policy_version)

    def link_state(self) -> dict[str, Any]:
        """For ``/healthz``: whether the link is up, its state (``refused`` with the console's
        reason, ``superseded``, … — :meth:`~agents.link.client.LinkClient.state`) and what waits in
        the buffer."""
        return {"configured": self.link is not None,
                "connected": bool(self.link is not None and self.link.connected.is_set()),
                **(self.link.state() if self.link is not None else {}),
                "buffered": self.buffer.count() if self.buffer else 0}

    def run(self) -> int:
        """Run until stopped (or ``duration_s``); returns the exit status.

        A ``--health-address`` that cannot be bound is logged as an error and the agent runs on
        without it: protecting production never waits on a metrics port (its probe then fails,
        which is how the operator learns of it)."""
        deadline = time.monotonic() + self.config.duration_s if self.config.duration_s else None
        health = None
        if self.config.health_address != "off":
            try:
                health = HealthServer(self.config.health_address, self.metrics, link_state=self.link_state,
                                      max_tick_age_s=max(10.0, 5 * self.config.mitigation_interval_s))
                health.start()
            except OSError as exc:
                log.error("--health-address %s: cannot listen (%s); /healthz and /metrics are not served",
                          self.config.health_address, exc.strerror or exc)
        if self.link is not None:
            self.link.start()
        try:
            drive(self.loop, self.monitor, self.config.mitigation_interval_s, lambda: self._stop, deadline,
                  metrics=self.metrics)
        finally:
            if self.link is not None:
                self.link.stop()
            if health is not None:
                health.stop()
            self.monitor.close()
        return 0


def drive(loop: MitigationLoop, monitor: PressureMonitor, interval_s: float, should_stop: Callable[[], bool],
          deadline_mono: float | None = None, *, metrics: AgentMetrics | None = None) -> None:
    """The agent's main loop: one ``poll()`` on every pressure source with a timeout until the
    next tick; events are handled the moment ``poll()`` returns, ticks every ``interval_s``
    (each tick and each handled event recorded in ``metrics`` when given)."""
    next_tick = time.monotonic()
    while not should_stop():
        now = time.monotonic()
        if deadline_mono is not None and now >= deadline_mono:
            break
        if now >= next_tick:
            loop.tick()
            if metrics is not None:
                metrics.ticked(time.time())
            next_tick = max(next_tick + interval_s, time.monotonic())
        timeout = next_tick - time.monotonic()
        if deadline_mono is not None:
            timeout = min(timeout, deadline_mono - time.monotonic())
        events = monitor.wait(max(0.0, timeout))
        if events:
            started = time.monotonic()
            loop.handle_events(events)
            if metrics is not None:
                metrics.events_handled(events, started_mono=started, finished_mono=time.monotonic())


def build_agent(config: AgentConfig) -> Agent:
    """Wire collectors, discovery, enforcer, pressure sources, buffer and link from ``config``.

    Raises:
        FacilityUnavailable: cgroup hierarchy or Docker engine missing.
        ConfigError: the workloads file is malformed at start-up.
    """
    fs = detect(config.cgroup_root, config.cgroup_version, config.psi_root)
    docker_client = None
    if "docker" in config.discovery or config.telemetry == "docker":
        try:
            docker_client = docker.DockerClient(base_url=config.docker_host) if config.docker_host else docker.from_env()
            docker_client.ping()
        except docker.errors.DockerException as exc:
            raise FacilityUnavailable("Docker engine", config.docker_host or "$DOCKER_HOST / local socket", str(exc)) from None
    kubelet = None
    if "kubelet" in config.discovery:
        verify: str | bool = False if config.kubelet_insecure else (config.kubelet_ca_file or True)
        kubelet = KubeletClient(config.kubelet_url, token_file=config.kubelet_token_file, verify=verify)
    sources: list[WorkloadSource] = []
    now = time.time()
    for name in config.discovery:
        if name == "file":
            assert config.workloads_file
            source = FileSource(config.workloads_file)
            source.load(now)
            sources.append(source)
        elif name == "docker":
            sources.append(DockerSource(docker_client, proc_root=config.proc_root, cgroup_version=fs.version))
        else:
            assert kubelet is not None
            sources.append(KubeletSource(kubelet, driver=config.kube_cgroup_driver, cgroup_root=config.kube_cgroup_root,
                                         infer_jobs=config.infer_job_batch))
    if config.telemetry != "kubelet":   # the node reading comes from --node-cgroup's memory files
        wait_for_node_cgroup(fs, config.node_cgroup, wait_s=config.node_cgroup_wait_s)
    node = NodeCollector(fs, config.proc_root, config.node_cgroup)
    telemetry: Telemetry
    node_reader = node.read
    if config.telemetry == "cgroup":
        telemetry = CgroupTelemetry(CgroupCollector(fs, config.proc_root))
    elif config.telemetry == "docker":
        telemetry = DockerStatsCollector(docker_client)
    elif config.telemetry == "cadvisor":
        telemetry = CadvisorCollector(config.cadvisor_url, config.cadvisor_api)
    else:
        assert kubelet is not None
        kubelet_telemetry = KubeletTelemetry(kubelet)
        telemetry = kubelet_telemetry
        node_reader = lambda now_s: kubelet_telemetry.last_node  # noqa: E731
    kube_api = None
    if config.kube_in_cluster or config.kube_api_url:
        kube_api = kube_api_client(in_cluster=config.kube_in_cluster, url=config.kube_api_url,
                                   token_file=config.kube_token_file, ca_file=config.kube_ca_file)
    enforcer = Enforcer(fs, docker_client=docker_client, kube_api=kube_api,
                        node_name=config.node_name if kube_api is not None else None, dry_run=config.dry_run)
    settings = LoopSettings(
        node_name=config.node_name, capacity=config.capacity, reserved_memory_bytes=config.reserved_memory_bytes,
        policy=config.policy,
        sampling_interval_s=config.sampling_interval_s, mitigation_interval_s=config.mitigation_interval_s,
        discovery_interval_s=config.discovery_interval_s, acute_grace_s=config.acute_grace_s,
        pressure_source=config.pressure_source, psi_window_s=config.psi_window_s,
        psi_cpu_threshold_ms=config.psi_cpu_threshold_ms, psi_memory_threshold_ms=config.psi_memory_threshold_ms)
    monitor = PressureMonitor()
    arming = SignalArming(settings, monitor, enforcer, fs, system_pressure_dir=str(Path(config.proc_root) / "pressure"),
                          node_cgroup=config.node_cgroup)
    buffer = link = None
    actions_log = Path(config.actions_log) if config.actions_log else None
    if config.link_url:
        buffer = LinkBuffer(Path(config.state_dir) / "link-buffer.sqlite3", node=config.node_name,
                            max_bytes=config.buffer_max_bytes)

    metrics = AgentMetrics()

    def emit(message: dict[str, Any]) -> None:
        metrics.action_emitted(message)
        if buffer is not None:
            buffer.append(message)
        if actions_log is not None and message.get("type") == "action":
            with actions_log.open("a") as handle:
                handle.write(json.dumps(message) + "\n")

    loop = MitigationLoop(settings, sources=sources, telemetry=telemetry, fs=fs, enforcer=enforcer,
                          node_reader=node_reader, arming=arming, emit=emit,
                          on_collector_error=metrics.collector_error)
    loop.discover(time.time())          # arm the pressure sources before the first hello
    agent = Agent(config, loop, monitor, buffer, None, metrics)
    if buffer is not None and config.link_url and (config.link_token or config.link_token_file
                                                   or config.join_secret_file):
        token: Any = config.link_token
        if config.link_token_file:
            path = Path(config.link_token_file)
            token = lambda: path.read_text().strip()  # noqa: E731 - re-read at every connect
        elif not token and config.join_secret_file:
            from agents.link.join import JoinedToken

            token = JoinedToken(link_url=config.link_url, node=config.node_name,
                                secret_file=config.join_secret_file, state_dir=config.state_dir)
        link = LinkClient(config.link_url, token, buffer, hello=agent.hello,
                          on_policy=loop.apply_policy_update, metrics=agent.metrics)
        buffer.on_append = link.notify
        agent.link = link
    for failure in arming.failures:
        log.warning("%s", failure)
    return agent


def wait_for_node_cgroup(fs, rel: str, *, wait_s: float, check_s: float = 1.0,
                         sleep: Callable[[float], None] = time.sleep,
                         monotonic: Callable[[], float] = time.monotonic) -> None:
    """Return once ``--node-cgroup`` ``rel`` exists in the memory hierarchy (and, on v1, the cpu
    one); wait up to ``wait_s`` for it (checking every ``check_s``, logging once), e.g. while
    the kubelet or dockerd that creates it starts. ``""`` (the whole machine) always exists.

    Raises:
        ConfigError: the group is still missing after ``wait_s`` (at once when 0), naming the
            flag, the path looked at and what is accepted.
    """
    if fs.exists(rel):
        return
    path = fs.group_dir(rel, "memory")
    if wait_s > 0:
        log.warning("--node-cgroup %s: %s does not exist yet; waiting up to %g s for it", rel, path, wait_s)
        deadline = monotonic() + wait_s
        while monotonic() < deadline:
            sleep(min(check_s, max(0.0, deadline - monotonic())))
            if fs.exists(rel):
                log.info("--node-cgroup %s: %s appeared", rel, path)
                return
    waited = f" after waiting {wait_s:g} s" if wait_s > 0 else ""
    raise ConfigError(f"{path} does not exist in the memory hierarchy{waited} ({fs.describe()})",
                      source="--node-cgroup", field=rel,
                      accepted="a group relative to --cgroup-root that holds every workload (kubepods, docker, "
                               "system.slice), '' for the whole machine, or --node-cgroup-wait-s to wait for it")


def run(config: AgentConfig) -> int:
    """Build and run the agent, stopping cleanly on SIGTERM/SIGINT."""
    agent = build_agent(config)
    signal.signal(signal.SIGTERM, agent.stop)
    signal.signal(signal.SIGINT, agent.stop)
    log.info("kalena-agent %s on %s: %s, discovery %s, telemetry %s, health %s", __version__, config.node_name,
             agent.loop.fs.describe(), ",".join(config.discovery), config.telemetry, config.health_address)
    return agent.run()
