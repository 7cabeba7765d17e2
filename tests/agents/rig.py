"""A mitigation loop on a temp-dir cgroup v2 tree (or any backend), with a workloads file and
real sleeper processes standing in for the workloads, for tests that drive time by hand."""

from __future__ import annotations

import json
import math
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np

from agents.cgroups.backend import CgroupV2
from agents.collectors.cgroup import CgroupCollector, NodeCollector
from agents.collectors.telemetry import CgroupTelemetry
from agents.discovery.files import FileSource
from agents.enforcer import Enforcer
from agents.loop import MitigationLoop
from agents.settings import LoopSettings
from kalena_engine.policy import Policy
from tests.agents.conftest import make_v2_tree, v2_files
from tests.worked import WORKED_POLICY

GIB = 2**30
SLEEPER = "import time\nprint('ready', flush=True)\nwhile True: time.sleep(60)"
STUBBORN = ("import signal, time\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\nprint('ready', flush=True)\n"
            "while True: time.sleep(60)")


class Rig:
    """Temp v2 tree ``root/kubepods/<name>`` per workload, one real process each."""

    def __init__(self, tmp: Path, *, capacity: dict[str, float], policy: Policy | None = None,
                 sampling_interval_s: float = 10.0) -> None:
        self.root = tmp / "cgroup"
        make_v2_tree(self.root, {"kubepods": v2_files()})
        (tmp / "proc" / "pressure").mkdir(parents=True)
        for res in ("cpu", "memory", "io"):
            (tmp / "proc" / "pressure" / res).write_text("some avg10=0.00 avg60=0.00 avg300=0.00 total=0\n"
                                                         "full avg10=0.00 avg60=0.00 avg300=0.00 total=0\n")
        self.proc_root = tmp / "proc"
        self.workloads_file = tmp / "workloads.json"
        self.entries: list[dict[str, Any]] = []
        self.procs: dict[str, subprocess.Popen] = {}
        self.messages: list[dict[str, Any]] = []
        cap = np.full(8, math.inf)
        cap[0] = capacity.get("cpu", math.inf)
        cap[1] = capacity.get("ram", math.inf)
        self.fs = CgroupV2(self.root)
        self.settings = LoopSettings(node_name="node-t", capacity=cap, policy=policy or WORKED_POLICY,
                                     sampling_interval_s=sampling_interval_s, mitigation_interval_s=1.0)
        self.enforcer = Enforcer(self.fs)

    def add(self, name: str, *, tier: str, requests: dict | None = None, limits: dict | None = None,
            priority: int = 0, start_time: float = 0.0, grace_s: float = 30.0, code: str = SLEEPER,
            annotations: dict | None = None, daemonset: bool = False, **files: Any) -> None:
        proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE)
        assert proc.stdout is not None and proc.stdout.readline().strip() == b"ready"
        self.procs[name] = proc
        make_v2_tree(self.root, {f"kubepods/{name}": v2_files(procs=f"{proc.pid}\n", **files)})
        self.entries.append({
            "id": name, "cgroup": f"kubepods/{name}", "labels": {"kalena.naughtian.io/tier": tier},
            "annotations": {"kalena.naughtian.io/priority": str(priority), **(annotations or {})},
            "requests": requests or {}, "limits": limits or {}, "start_time": start_time,
            "termination_grace_period_seconds": grace_s, "daemonset": daemonset})

    def set_files(self, name: str, **files: Any) -> None:
        make_v2_tree(self.root, {f"kubepods/{name}" if name else "kubepods": v2_files(**files)})

    def set_file(self, name: str, filename: str, text: str) -> None:
        (self.root / "kubepods" / name / filename).write_text(text)

    def file(self, name: str, filename: str) -> str:
        return (self.root / "kubepods" / name / filename).read_text().strip()

    def build(self, **kwargs: Any) -> MitigationLoop:
        self.workloads_file.write_text(json.dumps({"workloads": self.entries}))
        source = FileSource(self.workloads_file)
        source.load(0.0)
        node = NodeCollector(self.fs, self.proc_root, node_cgroup="kubepods")
        self.loop = MitigationLoop(self.settings, sources=[source],
                                   telemetry=CgroupTelemetry(CgroupCollector(self.fs, self.proc_root)),
                                   fs=self.fs, enforcer=self.enforcer, node_reader=node.read,
                                   emit=self.messages.append, **kwargs)
        return self.loop

    def actions(self, kind: str | None = None) -> list[dict[str, Any]]:
        return [m for m in self.messages if m["type"] == "action" and (kind is None or m["action"] == kind)]

    def alive(self, name: str) -> bool:
        return self.procs[name].poll() is None

    def close(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGKILL)
            proc.wait(10)
