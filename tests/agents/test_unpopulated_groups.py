"""A workload whose group holds no process gets no sample: its containers died (their runtime
stopped, or one is between restarts) and the empty group's 0 is not its usage. Without a sample
it ages to T_stale and the ledgers hold it at max(r, q) — found on the lab, where an engine
stopped for a simulated hour let production's reservations decay to nothing and batch was
placed in their room as the containers came back."""

from __future__ import annotations

import math
import os
import subprocess
import uuid
from pathlib import Path

import pytest

from agents.cgroups.backend import CgroupV2, detect
from agents.collectors.cgroup import CgroupCollector
from agents.collectors.telemetry import CgroupTelemetry
from agents.model import Workload
from kalena_engine.resources import RAM, zeros
from tests.agents.conftest import make_v2_tree, v2_files

GIB = 2**30
T0 = 1_000_000.0


def _workload(wid: str, cgroup: str) -> Workload:
    return Workload(id=wid, name=wid, kind="kubernetes", tier="service", priority=0, request=zeros(),
                    limit=zeros() + math.inf, start_s=0.0, grace_s=10.0, cgroup=cgroup)


def test_a_v2_group_the_kernel_reports_unpopulated_gets_no_sample_until_it_runs_again(tmp_path: Path) -> None:
    root = make_v2_tree(tmp_path / "cg", {"kubepods/up": {**v2_files(memory_bytes=GIB), "cgroup.events": "populated 1\nfrozen 0\n"},
                                          "kubepods/down": {**v2_files(memory_bytes=0), "cgroup.events": "populated 0\nfrozen 0\n"}})
    telemetry = CgroupTelemetry(CgroupCollector(CgroupV2(root), tmp_path / "proc"))
    up, down = _workload("up", "kubepods/up"), _workload("down", "kubepods/down")
    first = telemetry.collect([up, down], T0)
    assert set(first.samples) == {"up"} and first.samples["up"].usage[RAM] == GIB
    assert not first.failures and not first.gone            # not ended, not a failure: no reading this round
    (root / "kubepods" / "down" / "cgroup.events").write_text("populated 1\nfrozen 0\n")
    (root / "kubepods" / "down" / "memory.current").write_text(f"{GIB // 2}\n")
    again = telemetry.collect([up, down], T0 + 1)
    assert set(again.samples) == {"up", "down"} and again.samples["down"].usage[RAM] == GIB // 2


@pytest.mark.cgroup
def test_a_v1_pod_group_whose_container_process_died_gets_no_sample() -> None:
    # a pod's processes live in its containers' groups, not the pod's own: the whole subtree is read
    if not os.access("/sys/fs/cgroup/memory", os.W_OK):
        pytest.skip("no writable cgroup v1 memory hierarchy")
    fs = detect("/sys/fs/cgroup", "1")
    rel = f"kalena-test-pop-{uuid.uuid4().hex[:8]}/pod"
    for controller in ("cpu", "cpuacct", "memory"):
        d = fs.group_dir(f"{rel}/c1", controller)
        d.mkdir(parents=True, exist_ok=True)
    proc = subprocess.Popen(["sleep", "300"])
    try:
        for controller in ("cpu", "cpuacct", "memory"):
            (fs.group_dir(f"{rel}/c1", controller) / "cgroup.procs").write_text(str(proc.pid))
        collector = CgroupCollector(fs)
        pod = _workload("default/web-0", rel)
        assert fs.populated(rel) and collector.sample(pod, T0) is not None
        proc.kill()
        proc.wait(timeout=30)
        assert not fs.populated(rel)
        assert collector.sample(pod, T0 + 1) is None
        assert "default/web-0" not in collector._anchors      # the next rate starts from a fresh reading
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=30)
        for controller in ("cpu", "cpuacct", "memory"):
            for sub in (f"{rel}/c1", rel, rel.split("/")[0]):
                try:
                    fs.group_dir(sub, controller).rmdir()
                except OSError:
                    pass
