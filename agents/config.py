"""``kalena-agent run`` configuration: flags, each with an environment variable
(``KALENA_AGENT_<FLAG>``, e.g. ``--node-name`` ↔ ``KALENA_AGENT_NODE_NAME``); a flag wins over
its variable. Every value is checked before the agent touches anything: a bad one is a
:class:`~agents.errors.ConfigError` naming the flag (and variable), the value and what is
accepted, and the agent exits with status 2.

Capacity (``--capacity cpu=4,memory=16Gi``) is the node's allocatable in Kubernetes quantities;
dimensions not given default to the machine (cpu = online cpus, memory = MemTotal) minus
``--reserved`` (the Node's capacity − allocatable: what the kubelet keeps for the system), and
the rest are unconstrained. The agent takes the requests of the DaemonSets it discovers off it
itself (Phase 0, :meth:`agents.loop.MitigationLoop.node_capacity`), so its ledgers read the
post-Phase-0 C_n the console's do.
"""

from __future__ import annotations

import argparse
import math
import os
import socket
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from agents.cgroups.parse import parse_meminfo
from agents.errors import ConfigError, DiscoveryError
from agents.settings import PRESSURE_SOURCES
from agents.units import k8s_resources_vector, mcpu_from_cores
from kalena_engine.errors import PolicyError
from kalena_engine.policy import Policy
from kalena_engine.policy_file import parse_policy_text, policy_with_sections
from kalena_engine.resources import CPU, RAM

ENV_PREFIX = "KALENA_AGENT_"
DISCOVERY = ("file", "docker", "kubelet")
TELEMETRY = ("cgroup", "docker", "cadvisor", "kubelet")


@dataclass(frozen=True, eq=False)
class AgentConfig:
    """Validated configuration (see ``kalena-agent run --help`` for every field)."""

    node_name: str
    capacity: np.ndarray
    #: ``--reserved`` memory (bytes): the system's own share, expected in the node reading
    reserved_memory_bytes: float = 0.0
    cgroup_root: str = "/sys/fs/cgroup"
    cgroup_version: str = "auto"
    psi_root: str | None = None
    proc_root: str = "/proc"
    node_cgroup: str = ""
    node_cgroup_wait_s: float = 0.0
    discovery: tuple[str, ...] = ("file",)
    workloads_file: str | None = None
    docker_host: str | None = None
    docker_label_filter: str | None = None
    kubelet_url: str = "https://127.0.0.1:10250"
    kubelet_token_file: str | None = None
    kubelet_ca_file: str | None = None
    kubelet_insecure: bool = False
    kube_api_url: str | None = None
    kube_in_cluster: bool = False
    kube_token_file: str | None = None
    kube_ca_file: str | None = None
    kube_cgroup_driver: str = "cgroupfs"
    kube_cgroup_root: str = "kubepods"
    infer_job_batch: bool = False
    telemetry: str = "cgroup"
    cadvisor_url: str = "http://127.0.0.1:8080"
    cadvisor_api: str = "v2.0"
    sampling_interval_s: float = 10.0
    mitigation_interval_s: float = 1.0
    discovery_interval_s: float = 5.0
    pressure_source: str = "auto"
    psi_window_s: float = 2.0
    psi_cpu_threshold_ms: float = 150.0
    psi_memory_threshold_ms: float = 150.0
    acute_grace_s: float = 2.0
    policy: Policy = field(default_factory=Policy)
    link_url: str | None = None
    link_token: str | None = None
    link_token_file: str | None = None
    join_secret_file: str | None = None
    state_dir: str = "/var/lib/kalena-agent"
    buffer_max_bytes: int = 256 * 2**20
    dry_run: bool = False
    actions_log: str | None = None
    duration_s: float | None = None
    log_level: str = "INFO"
    health_address: str = "127.0.0.1:9640"


def _health_address(text: str) -> str:
    """``HOST:PORT`` (port 1–65535) or ``off``.

    Raises:
        ConfigError: anything else, naming the flag.
    """
    if text.strip().lower() == "off":
        return "off"
    host, sep, port = text.rpartition(":")
    if not sep or not host or not port.isdigit() or not 1 <= int(port) <= 65535:
        raise ConfigError(f"{text!r} is not HOST:PORT", source=f"--health-address / {_env_name('--health-address')}",
                          accepted="e.g. 127.0.0.1:9640, 0.0.0.0:9640 or off")
    return text.strip()


#: ``--node-cgroup`` value: the parent of the group the agent itself runs in
OWN_PARENT = "@parent"


def own_parent_cgroup(text: str, *, source: str = "/proc/self/cgroup") -> str:
    """``--node-cgroup @parent``: the parent of this process's own group, from the text of
    ``/proc/self/cgroup`` (cgroup(7): ``ID:CONTROLLERS:PATH`` lines; the ``memory`` controller's
    path on v1, the ``0::`` line on v2). An agent that runs as a container of the node's engine
    sits in ``<the engine's cgroup parent>/<container id>``, so this is the group holding every
    container of that engine (``docker`` by default, ``/kalena-<lab>/<node>`` on a lab node),
    without naming it per node. Returns the path relative to the hierarchy's root (no leading ``/``).

    Raises:
        ConfigError: no memory (v1) or unified (v2) line, or the process sits at the root
            (a host process: name the node's group instead), naming ``source``.
    """
    paths = {}
    for line in text.splitlines():
        parts = line.split(":", 2)
        if len(parts) == 3:
            for controller in parts[1].split(",") or [""]:
                paths[controller] = parts[2]
    path = paths.get("memory") or paths.get("")
    if path is None:
        raise ConfigError("no memory (v1) or unified (v2) line", source=source, field=f"--node-cgroup {OWN_PARENT}",
                          accepted="cgroup(7) lines ID:CONTROLLERS:PATH")
    parent = path.strip("/").rpartition("/")[0]
    if not parent:
        raise ConfigError(f"the agent runs in {path!r}, which has no parent group below the root",
                          source=source, field=f"--node-cgroup {OWN_PARENT}",
                          accepted="an agent running as a container of the node's engine, or --node-cgroup GROUP")
    return parent


#: ``--health-address`` host: this node's Swarm address (``docker info`` ``Swarm.NodeAddr``)
NODE_ADDRESS = "@node"


def resolve_health_address(address: str, docker_host: str | None) -> str:
    """``@node:PORT`` → ``<the node's Swarm address>:PORT``, asking the engine at
    ``docker_host`` (``GET /info`` ``Swarm.NodeAddr``): agents on the host network of nodes
    that share one network namespace (``kalena lab``) each listen on their own node's address;
    on separate machines it is the node's own address. Any other address is returned as is.

    Raises:
        ConfigError: the engine does not answer, or is in no swarm (no node address).
    """
    host, _, port = address.rpartition(":")
    if host != NODE_ADDRESS:
        return address
    import docker

    where = docker_host or "unix:///var/run/docker.sock"
    try:
        info = docker.DockerClient(base_url=where, timeout=10).info()
    except Exception as exc:  # noqa: BLE001 - any failure means the engine did not answer
        raise ConfigError(f"the engine at {where} does not answer: {exc}", source="--health-address",
                          field=NODE_ADDRESS) from None
    node_address = (info.get("Swarm") or {}).get("NodeAddr")
    if not node_address:
        raise ConfigError(f"the engine at {where} is in no swarm: it has no node address", source="--health-address",
                          field=NODE_ADDRESS, accepted="HOST:PORT on a standalone engine")
    return f"{node_address}:{port}"


def _env_name(flag: str) -> str:
    return ENV_PREFIX + flag.lstrip("-").replace("-", "_").upper()


def _machine_capacity(proc_root: str) -> np.ndarray:
    out = np.full(8, math.inf)
    out[CPU] = mcpu_from_cores(os.cpu_count() or 1)
    try:
        path = Path(proc_root) / "meminfo"
        out[RAM] = float(parse_meminfo(path.read_text(), source=str(path)).get("MemTotal", math.inf))
    except OSError:
        pass
    return out


def _pairs(value: str | None, flag: str) -> dict[str, str]:
    """``"cpu=4,memory=16Gi"`` → ``{"cpu": "4", "memory": "16Gi"}``.

    Raises:
        ConfigError: an item that is not ``name=quantity``, naming the flag and its variable.
    """
    out: dict[str, str] = {}
    for item in filter(None, (value or "").split(",")):
        key, eq, amount = item.partition("=")
        if not eq or not key.strip():
            raise ConfigError(f"{item!r} is not name=quantity", source=f"{flag} / {_env_name(flag)}",
                              accepted="e.g. cpu=4,memory=16Gi,ephemeral-storage=100Gi")
        out[key.strip()] = amount.strip()
    return out


def parse_reserved(reserved: str | None) -> np.ndarray:
    """``--reserved`` → ``(8,)`` internal units (0 where not given).

    Raises:
        ConfigError: a malformed item or quantity.
    """
    try:
        return k8s_resources_vector(_pairs(reserved, "--reserved"), source="--reserved", field="reserved")
    except DiscoveryError as exc:
        raise ConfigError(exc.problem, source=exc.source, field=exc.field, accepted=exc.accepted) from None


def parse_capacity(text: str | None, reserved: str | None, proc_root: str) -> np.ndarray:
    """``"cpu=4,memory=16Gi"`` (+ machine defaults − ``reserved``) → ``(8,)`` internal units."""
    try:
        capacity = k8s_resources_vector(_pairs(text, "--capacity"), source="--capacity", field="capacity",
                                        missing=math.nan)
    except DiscoveryError as exc:
        raise ConfigError(exc.problem, source=exc.source, field=exc.field, accepted=exc.accepted) from None
    machine = _machine_capacity(proc_root)
    capacity = np.where(np.isnan(capacity), machine, capacity) - parse_reserved(reserved)
    if not math.isfinite(capacity[CPU]) or capacity[CPU] <= 0:
        raise ConfigError(f"cpu capacity must be > 0 (got {capacity[CPU]:g} mcpu)", source="--capacity/--reserved")
    return capacity


def load_policy(path: str | None, overrides: Mapping[tuple[str, str], Any]) -> Policy:
    """The policy from a policy file (docs/design.md §10: YAML or JSON, ``apiVersion:
    kalena.naughtian.io/v1``, ``kind: Policy``, ``spec`` {estimator, eviction, …}), with the flag
    values ``overrides`` ((section, key) → value, None = not given) on top. Both are read by the
    engine's parser (:mod:`kalena_engine.policy_file`), the only one.

    Raises:
        ConfigError: the file cannot be read, or the parser refuses it or a flag value — naming
            the file (or ``flags``), line and key, and what is accepted.
    """
    policy = Policy()
    if path:
        try:
            text = Path(path).read_text()
        except OSError as exc:
            raise ConfigError(f"cannot read: {exc.strerror or exc}", source=path) from None
        except UnicodeDecodeError:
            raise ConfigError("not UTF-8 text", source=path, accepted="a YAML or JSON policy file") from None
        try:
            policy = parse_policy_text(text, source=path).policy
        except PolicyError as exc:
            raise ConfigError(exc.problem, source=exc.source, line=exc.line, field=exc.field,
                              accepted=exc.accepted) from None
    flags: dict[str, dict[str, Any]] = {}
    for (section, key), value in overrides.items():
        if value is not None:
            flags.setdefault(section, {})[key] = value
    try:
        return policy_with_sections(policy, flags, source="flags")
    except PolicyError as exc:
        raise ConfigError(exc.problem, source=exc.source, field=exc.field, accepted=exc.accepted) from None


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="kalena-agent run", description="Run the Kalena node agent.")
    add = parser.add_argument
    add("--node-name", help="node name reported to the control plane (default: $NODE_NAME or the hostname)")
    add("--node-name-from-engine", action="store_true",
        help="name the node as Kalena's Docker/Swarm watcher does, asking the engine at --docker-host: its label "
             "kalena.naughtian.io/node, else its Swarm node ID (in a swarm), else its Name")
    add("--capacity", help="the node's allocatable, e.g. cpu=4,memory=16Gi (default: the machine less --reserved); "
                           "the agent takes its DaemonSets' requests off it (Phase 0)")
    add("--reserved", help="subtracted from machine-derived capacity: the Node's capacity − allocatable (the "
                           "kubelet's system/kube reserved and eviction threshold), e.g. cpu=500m,memory=1Gi; "
                           "DaemonSets' requests are taken off by the agent itself")
    add("--cgroup-root", default="/sys/fs/cgroup")
    add("--cgroup-version", default="auto", choices=("auto", "1", "2"))
    add("--psi-root", help="v2 hierarchy for per-group PSI beside cgroup v1 (default: <root>/unified if present)")
    add("--proc-root", default="/proc")
    add("--node-cgroup", default="", help="group holding every workload (kubepods, docker); '' = whole machine; "
        f"{OWN_PARENT} = the parent of the agent's own group (an agent container: its engine's cgroup parent)")
    add("--node-cgroup-wait-s", type=float, default=0.0,
        help="wait this long at start for --node-cgroup to appear (0: refuse at once if it is missing)")
    add("--discovery", default="file", help="comma list of: file, docker, kubelet")
    add("--workloads-file", help="workloads file for --discovery file (JSON or YAML)")
    add("--docker-host", help="Docker Engine address (default: $DOCKER_HOST or the local socket)")
    add("--docker-label-filter", help="only containers carrying this label key")
    add("--kubelet-url", default="https://127.0.0.1:10250")
    add("--kubelet-token-file", help="bearer token for the kubelet and API server")
    add("--kubelet-ca-file")
    add("--kubelet-insecure", action="store_true",
        help="skip TLS verification of the kubelet only (self-signed serving certificates); never the API server")
    add("--kube-api-url", help="Kubernetes API server, for pod evictions (outside a cluster)")
    add("--kube-in-cluster", action="store_true",
        help="reach the API server with the pod's in-cluster config (service account token and CA)")
    add("--kube-token-file", help="bearer token for --kube-api-url (default: --kubelet-token-file)")
    add("--kube-ca-file", help="CA bundle verifying --kube-api-url (default: the system CAs)")
    add("--kube-cgroup-driver", default="cgroupfs", choices=("cgroupfs", "systemd"))
    add("--kube-cgroup-root", default="kubepods")
    add("--infer-job-batch", action="store_true", help="Job/CronJob pods without a tier label are batch")
    add("--telemetry", default="cgroup", choices=TELEMETRY)
    add("--cadvisor-url", default="http://127.0.0.1:8080")
    add("--cadvisor-api", default="v2.0", choices=("v1.3", "v2.0"))
    add("--sampling-interval-s", type=float, default=10.0)
    add("--mitigation-interval-s", type=float, default=1.0)
    add("--discovery-interval-s", type=float, default=5.0)
    add("--pressure-source", default="auto", choices=PRESSURE_SOURCES)
    add("--psi-window-s", type=float, default=2.0, help="trigger window; a multiple of 2 s without CAP_SYS_RESOURCE")
    add("--psi-cpu-threshold-ms", type=float, default=150.0)
    add("--psi-memory-threshold-ms", type=float, default=150.0)
    add("--acute-grace-s", type=float, default=2.0)
    add("--policy-file", help="policy file (docs/design.md §10: YAML or JSON, kind: Policy; `kalena` console export)")
    add("--min-run-time-s", type=float, help="T_min (eviction.min_run_time_s)")
    add("--evict-threshold-ratio", type=float, help="eviction.evict_threshold_ratio")
    add("--link-url", help="ws:// or wss:// URL of the console's agent endpoint (none: no link)")
    add("--link-token-file", help="file holding this node's bearer token ($KALENA_AGENT_LINK_TOKEN also works)")
    add("--join-secret-file", help="file holding the stack's join secret: without --link-token-file the agent joins "
        "once and keeps its own node token in --state-dir (link.token)")
    add("--state-dir", default="/var/lib/kalena-agent", help="where the link buffer (and a joined node token) lives")
    add("--buffer-max-bytes", type=int, default=256 * 2**20)
    add("--dry-run", action="store_true", help="decide and report, change nothing")
    add("--actions-log", help="append every action as a JSON line to this file")
    add("--duration-s", type=float, help="stop after this many seconds (tests, demos)")
    add("--log-level", default="INFO", choices=("DEBUG", "INFO", "WARNING", "ERROR"))
    add("--health-address", default="127.0.0.1:9640",
        help="HOST:PORT serving /healthz and /metrics (0.0.0.0:PORT for a kubelet probe on a hostNetwork pod; "
             f"{NODE_ADDRESS}:PORT: the node's Swarm address, asked of the engine — agents of several nodes sharing "
             "one network; 'off' serves nothing)")
    return parser


def _apply_env(parser: argparse.ArgumentParser, argv: Sequence[str], environ: Mapping[str, str]) -> list[str]:
    """Prefix ``argv`` with ``--flag value`` for every ``KALENA_AGENT_*`` variable set."""
    given = {a.split("=", 1)[0] for a in argv if a.startswith("--")}
    extra: list[str] = []
    for action in parser._actions:
        for flag in action.option_strings:
            if not flag.startswith("--") or flag == "--help" or flag in given:
                continue
            value = environ.get(_env_name(flag))
            if value is None:
                continue
            if action.nargs == 0:
                if value.strip().lower() in ("1", "true", "yes", "on"):
                    extra.append(flag)
                elif value.strip().lower() not in ("0", "false", "no", "off", ""):
                    raise ConfigError(f"{value!r} is not a boolean", source=_env_name(flag), accepted="true, false")
            else:
                extra += [flag, value]
    return extra + list(argv)


def parse_run_args(argv: Sequence[str], environ: Mapping[str, str] | None = None) -> AgentConfig:
    """Flags + environment → :class:`AgentConfig`.

    Raises:
        ConfigError: naming the flag/variable, the value and what is accepted.
    """
    environ = os.environ if environ is None else environ
    parser = build_parser()

    def fail(message: str) -> None:
        raise ConfigError(message, source="kalena-agent run")

    parser.error = fail  # type: ignore[method-assign]
    args = parser.parse_args(_apply_env(parser, argv, environ))

    def positive(flag: str, value: float) -> None:
        if not (math.isfinite(value) and value > 0):
            raise ConfigError(f"{value!r} must be > 0", source=f"{flag} / {_env_name(flag)}")

    for flag in ("--sampling-interval-s", "--mitigation-interval-s", "--discovery-interval-s", "--psi-window-s",
                 "--psi-cpu-threshold-ms", "--psi-memory-threshold-ms"):
        positive(flag, getattr(args, flag[2:].replace("-", "_")))
    if args.acute_grace_s < 0:
        raise ConfigError(f"{args.acute_grace_s!r} must be ≥ 0", source="--acute-grace-s")
    if not (math.isfinite(args.node_cgroup_wait_s) and args.node_cgroup_wait_s >= 0):
        raise ConfigError(f"{args.node_cgroup_wait_s!r} must be ≥ 0 seconds",
                          source=f"--node-cgroup-wait-s / {_env_name('--node-cgroup-wait-s')}")
    if args.psi_cpu_threshold_ms >= args.psi_window_s * 1000 or args.psi_memory_threshold_ms >= args.psi_window_s * 1000:
        raise ConfigError("a PSI threshold must be shorter than the window", source="--psi-*-threshold-ms",
                          accepted=f"< {args.psi_window_s * 1000:g} ms")
    discovery = tuple(x.strip() for x in args.discovery.split(",") if x.strip())
    for name in discovery:
        if name not in DISCOVERY:
            raise ConfigError(f"unknown discovery source {name!r}", source=f"--discovery / {_env_name('--discovery')}",
                              accepted=", ".join(DISCOVERY))
    if not discovery:
        raise ConfigError("no discovery source", source="--discovery", accepted=", ".join(DISCOVERY))
    if "file" in discovery and not args.workloads_file:
        raise ConfigError("--discovery file needs --workloads-file", source="--workloads-file")
    if args.telemetry == "kubelet" and "kubelet" not in discovery:
        raise ConfigError("--telemetry kubelet needs --discovery kubelet", source="--telemetry")
    token = environ.get(ENV_PREFIX + "LINK_TOKEN")
    if args.link_token_file:
        try:
            Path(args.link_token_file).read_text().strip()
        except OSError as exc:
            raise ConfigError(f"cannot read token: {exc.strerror or exc}", source="--link-token-file") from None
        token = None  # read from the file at every connect (a projected token rotates)
    if args.link_url:
        if not args.link_url.startswith(("ws://", "wss://")):
            raise ConfigError(f"{args.link_url!r} is not a WebSocket URL", source="--link-url", accepted="ws://… or wss://…")
        if not token and not args.link_token_file and not args.join_secret_file:
            raise ConfigError("--link-url needs a token", source="--link-token-file / KALENA_AGENT_LINK_TOKEN",
                              accepted="a node token, or --join-secret-file to join with the stack's join secret")
    if args.join_secret_file:
        try:
            Path(args.join_secret_file).read_text().strip()
        except OSError as exc:
            raise ConfigError(f"cannot read the join secret: {exc.strerror or exc}",
                              source="--join-secret-file") from None
        if not args.link_url:
            raise ConfigError("--join-secret-file needs --link-url (the console it joins)", source="--join-secret-file")
    policy = load_policy(args.policy_file, {("eviction", "min_run_time_s"): args.min_run_time_s,
                                            ("eviction", "evict_threshold_ratio"): args.evict_threshold_ratio})
    if args.node_name_from_engine:
        node = engine_node_name(args.docker_host or environ.get("DOCKER_HOST") or "unix:///var/run/docker.sock")
    else:
        node = args.node_name or environ.get("NODE_NAME") or socket.gethostname()
    return AgentConfig(
        node_name=node, capacity=parse_capacity(args.capacity, args.reserved, args.proc_root),
        reserved_memory_bytes=float(parse_reserved(args.reserved)[RAM]),
        cgroup_root=args.cgroup_root, cgroup_version=args.cgroup_version, psi_root=args.psi_root,
        proc_root=args.proc_root, node_cgroup=_node_cgroup(args.node_cgroup),
        node_cgroup_wait_s=args.node_cgroup_wait_s, discovery=discovery,
        workloads_file=args.workloads_file, docker_host=args.docker_host or environ.get("DOCKER_HOST"),
        docker_label_filter=args.docker_label_filter, kubelet_url=args.kubelet_url,
        kubelet_token_file=args.kubelet_token_file, kubelet_ca_file=args.kubelet_ca_file,
        kubelet_insecure=args.kubelet_insecure, kube_api_url=args.kube_api_url, kube_in_cluster=args.kube_in_cluster,
        kube_token_file=args.kube_token_file or args.kubelet_token_file, kube_ca_file=args.kube_ca_file,
        kube_cgroup_driver=args.kube_cgroup_driver, kube_cgroup_root=args.kube_cgroup_root,
        infer_job_batch=args.infer_job_batch, telemetry=args.telemetry, cadvisor_url=args.cadvisor_url,
        cadvisor_api=args.cadvisor_api, sampling_interval_s=args.sampling_interval_s,
        mitigation_interval_s=args.mitigation_interval_s, discovery_interval_s=args.discovery_interval_s,
        pressure_source=args.pressure_source, psi_window_s=args.psi_window_s,
        psi_cpu_threshold_ms=args.psi_cpu_threshold_ms, psi_memory_threshold_ms=args.psi_memory_threshold_ms,
        acute_grace_s=args.acute_grace_s, policy=policy, link_url=args.link_url, link_token=token,
        link_token_file=args.link_token_file, join_secret_file=args.join_secret_file,
        state_dir=args.state_dir, buffer_max_bytes=args.buffer_max_bytes, dry_run=args.dry_run,
        actions_log=args.actions_log, duration_s=args.duration_s, log_level=args.log_level,
        health_address=resolve_health_address(_health_address(args.health_address),
                                              args.docker_host or environ.get("DOCKER_HOST")))


def engine_node_name(docker_host: str) -> str:
    """The node name Kalena's watcher gives this engine (``GET /info``): the engine label
    ``kalena.naughtian.io/node``, else — in an active swarm — the Swarm node ID, else the
    engine's ``Name`` (docs/docker.md; the watcher's own rule is
    :func:`agents.orchestrators.docker.swarm.node_name`).

    Raises:
        ConfigError: the engine does not answer (naming it).
    """
    import docker

    try:
        info = docker.DockerClient(base_url=docker_host, timeout=10).info()
    except Exception as exc:  # noqa: BLE001 - any failure means the engine did not answer
        raise ConfigError(f"the engine at {docker_host} does not answer: {exc}", source="--node-name-from-engine",
                          accepted="--docker-host (or DOCKER_HOST) of this node's running engine") from None
    labels = dict(label.split("=", 1) for label in info.get("Labels") or [] if "=" in label)
    swarm = info.get("Swarm") or {}
    if labels.get("kalena.naughtian.io/node"):
        return labels["kalena.naughtian.io/node"]
    if swarm.get("LocalNodeState") == "active" and swarm.get("NodeID"):
        return str(swarm["NodeID"])
    return str(info.get("Name") or "")


def _node_cgroup(value: str) -> str:
    if value.strip() != OWN_PARENT:
        return value.strip("/")
    try:
        text = Path("/proc/self/cgroup").read_text()
    except OSError as exc:
        raise ConfigError(f"cannot read: {exc.strerror or exc}", source="/proc/self/cgroup",
                          field=f"--node-cgroup {OWN_PARENT}") from None
    return own_parent_cgroup(text)
