"""Runs the real mitigation loop on its own thread (as ``kalena-agent run`` does) for the
real-kernel and Docker tests."""

from __future__ import annotations

import json
import math
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np

from agents.cgroups.backend import detect
from agents.collectors.cgroup import CgroupCollector, NodeCollector
from agents.collectors.telemetry import CgroupTelemetry
from agents.discovery.base import WorkloadSource
from agents.discovery.files import FileSource
from agents.enforcer import Enforcer
from agents.loop import MitigationLoop
from agents.pressure.arming import SignalArming
from agents.pressure.monitor import PressureMonitor
from agents.runner import drive
from agents.settings import LoopSettings
from kalena_engine.policy import Policy
from tests.worked import WORKED_POLICY


class RunningAgent:
    """A real agent loop on the real cgroup tree, stopped by :meth:`stop`."""

    def __init__(self, *, sources: list[WorkloadSource], node_cgroup: str, cpu_mcpu: float = math.inf,
                 ram_bytes: float = math.inf, policy: Policy | None = None, docker_client: Any = None,
                 pressure_source: str = "auto", tick_s: float = 0.5, cpu_poll: bool = True) -> None:
        self.fs = detect("/sys/fs/cgroup")
        capacity = np.full(8, math.inf)
        capacity[0], capacity[1] = cpu_mcpu, ram_bytes
        self.settings = LoopSettings(node_name="test-node", capacity=capacity, policy=policy or WORKED_POLICY,
                                     mitigation_interval_s=tick_s, discovery_interval_s=tick_s,
                                     pressure_source=pressure_source, cpu_poll=cpu_poll)
        self.enforcer = Enforcer(self.fs, docker_client=docker_client)
        self.monitor = PressureMonitor()
        self.arming = SignalArming(self.settings, self.monitor, self.enforcer, self.fs, node_cgroup=node_cgroup)
        self.messages: list[dict[str, Any]] = []
        self.loop = MitigationLoop(self.settings, sources=sources,
                                   telemetry=CgroupTelemetry(CgroupCollector(self.fs)), fs=self.fs,
                                   enforcer=self.enforcer, node_reader=NodeCollector(self.fs, node_cgroup=node_cgroup).read,
                                   arming=self.arming, emit=self.messages.append)
        self._stop = threading.Event()
        self.thread = threading.Thread(target=drive, args=(self.loop, self.monitor, tick_s, self._stop.is_set),
                                       daemon=True, name="test-agent")
        self.thread.start()

    def actions(self, kind: str | None = None) -> list[dict[str, Any]]:
        return [m for m in list(self.messages) if m["type"] == "action" and (kind is None or m["action"] == kind)]

    def stop(self) -> None:
        self._stop.set()
        self.monitor.wake()
        self.thread.join(15)
        self.monitor.close()


def write_workloads(path: Path, entries: list[dict[str, Any]]) -> FileSource:
    path.write_text(json.dumps({"workloads": entries}))
    source = FileSource(path)
    source.load(time.time())
    return source


def wait_for(predicate, timeout_s: float = 30.0, every_s: float = 0.1) -> bool:
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        if predicate():
            return True
        time.sleep(every_s)
    return bool(predicate())
