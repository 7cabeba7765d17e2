"""The enforcer: the only code in the agent that changes anything on the node.

It writes cgroup files (CFS quota, memory limits), signals processes, makes the mutating Docker
Engine calls (kill, update) and Kubernetes API calls (a pod's ``DisruptionTarget`` condition and its
deletion), and registers kernel
notifications (PSI triggers, eventfd thresholds). Collectors and discovery only read; the
engine only decides; the mitigation loop only wires them together. An architecture test checks
that no other agent module writes files, signals processes or calls a mutating Docker method.

Every call returns an :class:`Applied` with what was written and how long it took, and never
raises for an operational failure (``EBUSY`` on a memory limit below usage, a vanished
container, a refused eviction): the failure is reported as data and the loop carries on.
``dry_run`` records the intended writes and performs none.
"""

from __future__ import annotations

import errno
import os
import signal
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import docker.errors
import requests
from kubernetes import client as k8s
from kubernetes.client.rest import ApiException

from agents.cgroups.backend import CgroupFs
from agents.model import KIND_DOCKER, KIND_KUBERNETES, KIND_PROCESS, Workload


@dataclass(frozen=True)
class Applied:
    """Outcome of one enforcement call.

    Attributes:
        ok: every step succeeded.
        what: ``cpu_quota`` | ``memory_cap`` | ``sigterm`` | ``sigkill`` …
        writes: ``(target, text)`` pairs written (or, in dry-run, that would have been).
        error: what failed and why (``None`` if ok).
        started_mono, finished_mono: ``time.monotonic()`` around the call.
        dry_run: nothing was written.
    """

    ok: bool
    what: str
    writes: tuple[tuple[str, str], ...]
    error: str | None
    started_mono: float
    finished_mono: float
    dry_run: bool = False


def _errno_text(exc: OSError) -> str:
    name = errno.errorcode.get(exc.errno or 0, str(exc.errno))
    return f"{name} ({exc.strerror})"


class Enforcer:
    """Applies decisions (module docstring).

    Args:
        fs: cgroup backend (formats the files to write).
        docker_client: a ``docker.DockerClient`` for ``docker`` workloads (or ``None``).
        kube_api: a ``kubernetes.client.ApiClient`` for ``kubernetes`` workloads (status patch,
            delete) — in-cluster config with the service account's CA in production
            (:func:`kube_api_client`); ``None`` when the node runs no Kubernetes pods.
        node_name: this agent's node: a pod is evicted or deleted only after the API confirms it
            is bound to this node. The API server enforces the same (the admission policy
            ``kalena-agent-own-node`` of deploy/agent/daemonset.yaml refuses the agent's status
            patch or delete of a pod bound to another node); this check names the refusal early.
        dry_run: record intended changes only.
    """

    def __init__(self, fs: CgroupFs, *, docker_client: Any = None, kube_api: k8s.ApiClient | None = None,
                 node_name: str | None = None, dry_run: bool = False,
                 clock_mono: Callable[[], float] = time.monotonic) -> None:
        self.fs = fs
        self.docker = docker_client
        self.kube = k8s.CoreV1Api(kube_api) if kube_api is not None else None
        self.node_name = node_name
        self.dry_run = dry_run
        self.clock_mono = clock_mono

    # --- cgroup files ---------------------------------------------------------------------

    def _write_all(self, what: str, writes: Sequence[tuple[Path, str]]) -> Applied:
        started = self.clock_mono()
        done: list[tuple[str, str]] = []
        if self.dry_run:
            return Applied(True, what, tuple((str(p), t) for p, t in writes), None, started, self.clock_mono(), True)
        for path, text in writes:
            try:
                fd = os.open(path, os.O_WRONLY | os.O_TRUNC)
                try:
                    os.write(fd, text.encode())
                finally:
                    os.close(fd)
            except OSError as exc:
                return Applied(False, what, tuple(done), f"{path}: write {text!r} failed: {_errno_text(exc)}",
                               started, self.clock_mono())
            done.append((str(path), text))
        return Applied(True, what, tuple(done), None, started, self.clock_mono())

    def set_cpu_quota(self, workload: Workload, quota_us: int | None, period_us: int) -> Applied:
        """Write the workload group's CFS quota (``cpu.cfs_quota_us``/``cpu.cfs_period_us`` on v1,
        ``cpu.max`` on v2); ``None`` removes the quota."""
        return self._write_all("cpu_quota", self.fs.cpu_quota_writes(workload.cgroup, quota_us, period_us))

    def set_cpu_weight(self, workload: Workload, weight: int) -> Applied:
        """Write the workload group's cpu weight (v1 ``cpu.shares``, v2 ``cpu.weight``)."""
        return self._write_all("cpu_weight", self.fs.cpu_weight_writes(workload.cgroup, weight))

    def set_memory_cap(self, workload: Workload, high_bytes: float | None, max_bytes: float | None) -> Applied:
        """Write the workload group's memory caps (v2 ``memory.max`` + ``memory.high``; v1
        ``memory.limit_in_bytes`` = the smaller). ``EBUSY`` (usage above the new v1 limit) comes
        back as a failed :class:`Applied`."""
        return self._write_all("memory_cap", self.fs.memory_limit_writes(workload.cgroup, high_bytes, max_bytes))

    # --- termination ----------------------------------------------------------------------

    def _signal_group(self, workload: Workload, sig: int, what: str) -> Applied:
        started = self.clock_mono()
        pids = self.fs.procs(workload.cgroup)
        writes = tuple((f"pid {pid}", signal.Signals(sig).name) for pid in pids)
        if self.dry_run:
            return Applied(True, what, writes, None, started, self.clock_mono(), True)
        failed = []
        for pid in pids:
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                continue
            except OSError as exc:
                failed.append(f"pid {pid}: {_errno_text(exc)}")
        error = "; ".join(failed) or None
        return Applied(not failed, what, writes, error, started, self.clock_mono())

    def _docker(self, workload: Workload, what: str, sig: str) -> Applied:
        started = self.clock_mono()
        ref = workload.runtime_ref
        writes: list[tuple[str, str]] = []
        if self.docker is None:
            return Applied(False, what, (), "no Docker client configured", started, self.clock_mono())
        if self.dry_run:
            return Applied(True, what, ((f"docker:{ref[:12]}", f"kill {sig}"),), None, started, self.clock_mono(), True)
        try:
            if sig == "SIGTERM":
                policy = (self.docker.api.inspect_container(ref).get("HostConfig") or {}).get("RestartPolicy") or {}
                if policy.get("Name") not in (None, "", "no"):
                    self.docker.api.update_container(ref, restart_policy={"Name": "no"})
                    writes.append((f"docker:{ref[:12]}", "restart_policy=no"))
            self.docker.api.kill(ref, signal=sig)
            writes.append((f"docker:{ref[:12]}", f"kill {sig}"))
        except docker.errors.NotFound:
            return Applied(True, what, tuple(writes), None, started, self.clock_mono())
        except docker.errors.APIError as exc:
            if "is not running" in str(exc):
                return Applied(True, what, tuple(writes), None, started, self.clock_mono())
            return Applied(False, what, tuple(writes), f"docker {ref[:12]}: {exc.explanation or exc}", started,
                           self.clock_mono())
        except (docker.errors.DockerException, requests.RequestException) as exc:   # engine away, answer cut short
            return Applied(False, what, tuple(writes), f"docker {ref[:12]}: {exc}", started, self.clock_mono())
        return Applied(True, what, tuple(writes), None, started, self.clock_mono())

    def _kube(self, workload: Workload, what: str, grace_s: float) -> Applied:
        started = self.clock_mono()
        if self.kube is None:
            return Applied(False, what, (), "no Kubernetes API server configured (--kube-in-cluster or "
                           "--kube-api-url)", started, self.clock_mono())
        namespace, _, name = workload.runtime_ref.partition("/")
        grace = int(max(0, round(grace_s))) if what == "sigterm" else 0
        verb = "PATCH status, DELETE" if what == "sigterm" else "DELETE"
        writes = ((f"{verb} pods/{namespace}/{name}", f"gracePeriodSeconds={grace}"),)
        if self.dry_run:
            return Applied(True, what, writes, None, started, self.clock_mono(), True)
        try:
            if self.node_name:
                pod = self.kube.read_namespaced_pod(name, namespace, _request_timeout=5)
                bound = pod.spec.node_name if pod.spec else None
                if bound != self.node_name:
                    return Applied(False, what, (), f"pod {namespace}/{name} is bound to {bound!r}, not to this "
                                   f"agent's node {self.node_name!r}: refused", started, self.clock_mono())
            if what == "sigterm":  # a node-pressure eviction, as the kubelet's own: see DISRUPTION
                _read_and_release(self.kube.patch_namespaced_pod_status(
                    name, namespace, disruption_patch(), _content_type="application/strategic-merge-patch+json",
                    _preload_content=False, _request_timeout=5))
            _read_and_release(self.kube.delete_namespaced_pod(
                name, namespace, grace_period_seconds=grace, _preload_content=False, _request_timeout=5))
        except ApiException as exc:
            if exc.status == 404:  # already gone: nothing left to stop
                return Applied(True, what, writes, None, started, self.clock_mono())
            hint = " (the API server's admission refused it: is the pod on this node?)" if exc.status in (400, 403) \
                else ""
            return Applied(False, what, (), f"{verb} pods/{namespace}/{name}: HTTP {exc.status}{hint} "
                           f"{(exc.body or '')[:200]}", started, self.clock_mono())
        except Exception as exc:  # noqa: BLE001 - connection errors, timeouts: reported, never raised
            return Applied(False, what, (), f"{verb} pods/{namespace}/{name}: {type(exc).__name__}: {exc}",
                           started, self.clock_mono())
        return Applied(True, what, writes, None, started, self.clock_mono())

    def terminate(self, workload: Workload, grace_s: float) -> Applied:
        """Start a graceful termination: SIGTERM to every process of the group (process), a
        SIGTERM kill with the restart policy set to ``no`` (Docker), or (Kubernetes) the pod's
        ``DisruptionTarget`` condition (:func:`disruption_patch`) and its deletion with
        ``gracePeriodSeconds``. The SIGKILL after the grace is :meth:`kill`."""
        if workload.kind == KIND_DOCKER:
            return self._docker(workload, "sigterm", "SIGTERM")
        if workload.kind == KIND_KUBERNETES:
            return self._kube(workload, "sigterm", grace_s)
        return self._signal_group(workload, signal.SIGTERM, "sigterm")

    def kill(self, workload: Workload) -> Applied:
        """End the grace: SIGKILL (process, Docker) or delete with grace 0 (Kubernetes)."""
        if workload.kind == KIND_DOCKER:
            return self._docker(workload, "sigkill", "SIGKILL")
        if workload.kind == KIND_KUBERNETES:
            return self._kube(workload, "sigkill", 0)
        assert workload.kind == KIND_PROCESS
        return self._signal_group(workload, signal.SIGKILL, "sigkill")

    # --- kernel notifications -------------------------------------------------------------

    def arm_psi_trigger(self, path: Path, stall: str, threshold_us: int, window_us: int) -> int:
        """Open ``path`` ``O_RDWR|O_NONBLOCK`` and write the NUL-terminated trigger
        ``"<stall> <threshold_us> <window_us>\\0"``; returns the fd to poll for ``POLLPRI``.

        Raises:
            OSError: as the kernel reports it (``EINVAL`` bad window, ``ENOENT`` no PSI …).
        """
        fd = os.open(path, os.O_RDWR | os.O_NONBLOCK | os.O_CLOEXEC)
        try:
            os.write(fd, f"{stall} {int(threshold_us)} {int(window_us)}".encode() + b"\0")
        except OSError:
            os.close(fd)
            raise
        return fd

    def arm_memory_threshold(self, usage_file: Path, event_control: Path, threshold_bytes: int) -> tuple[int, int]:
        """Register an eventfd threshold on a v1 group's ``memory.usage_in_bytes``; returns
        ``(eventfd, usage fd)`` (close both to unregister).

        Raises:
            OSError: as the kernel reports it.
        """
        efd = os.eventfd(0, os.EFD_CLOEXEC | os.EFD_NONBLOCK)
        try:
            ufd = os.open(usage_file, os.O_RDONLY | os.O_CLOEXEC)
        except OSError:
            os.close(efd)
            raise
        try:
            cfd = os.open(event_control, os.O_WRONLY | os.O_CLOEXEC)
            try:
                os.write(cfd, f"{efd} {ufd} {int(threshold_bytes)}".encode())
            finally:
                os.close(cfd)
        except OSError:
            os.close(efd)
            os.close(ufd)
            raise
        return efd, ufd


#: The condition the agent sets before deleting a pod it evicts. The agent's evictions are
#: node-pressure evictions, like the kubelet's own (which sets ``TerminationByKubelet``): they do
#: not go through the Eviction API, whose admission request carries the Eviction and not the pod,
#: so the API server could not check the pod's node there; PodDisruptionBudgets are therefore not
#: consulted, as for the kubelet's. ``DisruptionTarget=True`` keeps what the Eviction API gave:
#: a Job's ``podFailurePolicy`` rule ``Ignore`` on it (the admission webhook adds one) does not
#: count the evicted pod against ``backoffLimit``.
DISRUPTION = {"type": "DisruptionTarget", "status": "True", "reason": "TerminationByKalenaAgent"}


def disruption_patch() -> dict:
    """The strategic-merge patch of ``pods/status`` that marks a pod the agent evicts:
    ``{"status": {"conditions": [DISRUPTION + message + lastTransitionTime]}}`` (conditions merge
    by ``type``, so other conditions stay)."""
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    return {"status": {"conditions": [DISRUPTION | {"message": "Kalena agent: evicted under node pressure",
                                                    "lastTransitionTime": now}]}}


def _read_and_release(resp) -> None:
    """Read the answer whole, then give its connection back to the pool: an unread body left on
    a kept-alive connection would be read as the start of the next answer."""
    try:
        resp.read()
    finally:
        resp.release_conn()


def kube_api_client(*, in_cluster: bool, url: str | None, token_file: str | None, ca_file: str | None) -> k8s.ApiClient:
    """The API server client of the agent: in-cluster config (``KUBERNETES_SERVICE_HOST``, the
    service account's token — re-read as the kubelet rotates it — and CA bundle), or ``url`` with
    ``token_file`` (re-read on every refresh) verified against ``ca_file`` (the system CAs when
    ``None``). TLS verification of the API server is never turned off.

    Raises:
        kubernetes.config.ConfigException: not in a cluster (``in_cluster``).
    """
    from kubernetes import config as k8s_config

    if in_cluster:
        configuration = k8s.Configuration()
        k8s_config.load_incluster_config(client_configuration=configuration)
    else:
        configuration = k8s.Configuration(host=url)
    configuration.retries = False  # each call is made once, within its own timeout (urllib3 retried 3 ×)
    if in_cluster:
        return k8s.ApiClient(configuration)
    if ca_file:
        configuration.ssl_ca_cert = ca_file
    if token_file:
        def refresh(cfg: k8s.Configuration) -> None:
            cfg.api_key["authorization"] = Path(token_file).read_text().strip()
            cfg.api_key_prefix["authorization"] = "Bearer"
        refresh(configuration)
        configuration.refresh_api_key_hook = refresh
    return k8s.ApiClient(configuration)
