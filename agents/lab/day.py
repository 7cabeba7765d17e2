"""A lab's day in Kubernetes mode: the slice ``kalena lab slice`` renders, loaded into the lab
by ``kalena lab up``, and its batch schedule played by ``kalena lab play`` (docs/lab.md "The
slice in the lab").

* :func:`render_for_lab` renders the slice for the lab's own nodes: each node's capacity less
  what the agent DaemonSet's pod requests on it (the slice's production then fits beside it, as
  Kuberina's Phase 0 fits production beside the DaemonSets it knows), the lab's name, and the
  speed, seed, load factor and window given; written to ``<state dir>/slice``.
* :func:`load_production` labels the lab's Nodes as ``placement.json`` says, applies
  ``kubernetes/production.yaml`` with kubectl and starts the production binder
  (:mod:`agents.lab.binder`, the lab's stand-in for kube-scheduler), recorded in ``lab.json``
  like the control plane's processes so ``status`` shows it and ``down`` stops it.
* :func:`play` creates each arrival's manifest of ``batch-schedule.json`` with ``kubectl create
  -f`` at its ``at_s`` after the play started, so Kalena's webhook converts it and Kalena's
  scheduler places it; recorded in ``lab.json`` while it runs.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from agents.lab.errors import LabError
from agents.lab.state import process_ref, state_read, state_write

ROOT = Path(__file__).resolve().parents[2]
AGENT_DAEMONSET = ROOT / "deploy" / "agent" / "daemonset.yaml"
PLAY = "lab-play"
BINDER = "lab-production-binder"


def _quantity_m(text: str) -> int:
    text = str(text)
    return int(text[:-1]) if text.endswith("m") else int(float(text) * 1000)


def _quantity_mib(text: str) -> int:
    units = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "K": 10**3, "M": 10**6, "G": 10**9}
    text = str(text)
    for suffix, factor in units.items():
        if text.endswith(suffix):
            return int(float(text[: -len(suffix)]) * factor) // 2**20
    return int(text) // 2**20


def agent_request(daemonset: Path = AGENT_DAEMONSET) -> tuple[int, int]:
    """What the agent DaemonSet's pod requests on every node: ``(cpu m, memory MiB)``, summed over
    its containers, read from the deploy file."""
    cpu = mib = 0
    for doc in yaml.safe_load_all(daemonset.read_text()):
        if doc and doc.get("kind") == "DaemonSet":
            for c in doc["spec"]["template"]["spec"].get("containers") or []:
                req = (c.get("resources") or {}).get("requests") or {}
                cpu += _quantity_m(req.get("cpu", "0"))
                mib += _quantity_mib(req.get("memory", "0"))
    return cpu, mib


def render_for_lab(*, name: str, nodes: int, cpu_m: int, memory_mib: int, out_dir: Path, options: dict[str, Any],
                   data_root: Path, say: Callable[[str], None] = print) -> Path:
    """Render the slice for the lab's nodes into ``out_dir`` (replaced); returns it.

    ``options``: :class:`agents.lab.slice.SliceConfig` fields (speed, seed, load_factor, hours,
    max_pods_per_node, max_batch_pods) and input overrides (infra, workloads, blueprint,
    usage_dir, batch_trace, google_events, google_usage).

    Raises:
        InputError: a missing data file (named with its flag) or a slice that does not fit;
            nothing is written then.
        LabError: the agent's request leaves no room on a node.
    """
    from agents.lab.slice import SliceConfig, render_slice, resolve_inputs, write_slice

    agent_m, agent_mib = agent_request()
    if cpu_m - agent_m <= 0 or memory_mib - agent_mib <= 0:
        raise LabError(f"the agent's pod requests {agent_m} m / {agent_mib} MiB: nothing is left of a "
                       f"{cpu_m} m / {memory_mib} MiB node for production", source="kalena lab up",
                       field="--cpu-m/--memory-mib", accepted="larger nodes, or --no-slice")
    inputs = resolve_inputs(data_root, {k: options.get(k) for k in (
        "infra", "workloads", "blueprint", "usage_dir", "batch_trace", "google_events", "google_usage")})
    fields = {k: options[k] for k in ("speed", "seed", "load_factor", "hours", "max_pods_per_node", "max_batch_pods")
              if options.get(k) is not None}
    config = SliceConfig(nodes=nodes, cpu_m=cpu_m - agent_m, memory_mib=memory_mib - agent_mib, lab_name=name,
                         **fields)
    say(f"kalena lab: rendering the slice for {nodes} node(s) of {config.cpu_m} m / {config.memory_mib} MiB "
        f"(each node less the agent's {agent_m} m / {agent_mib} MiB), speed {config.speed}, seed {config.seed}, "
        f"load factor {config.load_factor}")
    rendered = render_slice(config, inputs)
    out_dir = Path(out_dir)
    shutil.rmtree(out_dir, ignore_errors=True)
    write_slice(rendered, out_dir)
    say(f"kalena lab: slice written to {out_dir}: {len(rendered.production.pods)} production pods, "
        f"{len(rendered.batch.groups)} batch arrivals ({sum(g.pods for g in rendered.batch.groups)} pods)")
    return out_dir


def _record(name: str, address: str, log: Path, proc_pid: int, argv: list[str], line: str) -> dict[str, Any]:
    return {"name": name, "workload": f"lab/{name}", "container": name, "argv": argv, "address": address,
            "log": str(log), "process": process_ref(proc_pid), "node": "", "probes": {}, "substitutions": [line],
            "ignored": [], "env": {}, "directory": ""}


def load_production(state_dir: Path, slice_dir: Path, *, say: Callable[[str], None] = print) -> dict[str, Any]:
    """Label the lab's Nodes, apply the slice's production, start the production binder.

    Raises:
        LabError: kubectl refused a label or the manifests (its message quoted).
    """
    from agents.lab.kubernetes import _start, kubectl

    state = state_read(state_dir)
    placement_file = slice_dir / "placement.json"
    placement = json.loads(placement_file.read_text())
    for node, spec in placement["nodes"].items():
        labels = [f"{k}={v}" for k, v in sorted(spec["labels"].items()) if k != "kubernetes.io/hostname"]
        if labels:
            kubectl(state, "label", "node", node, "--overwrite", *labels)
    say(f"kalena lab: {len(placement['nodes'])} Node(s) labelled as the blueprint's nodes (placement.json)")
    logs = Path(state["logs"])
    argv = [sys.executable, "-m", "agents.lab.binder", "--api-server", state["apiserver"]["url"], "--placement",
            str(placement_file), "--lab", state["name"]]
    proc = _start(argv, {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "PYTHONUNBUFFERED": "1"},
                  logs / "production-binder.log")
    state["processes"].append(_record(BINDER, state["apiserver"]["address"], logs / "production-binder.log", proc.pid,
                                      argv, "kube-scheduler → the lab's production binder: binds each production pod "
                                      "of the slice to the node the blueprint chose (placement.json)"))
    state["slice"] = {"directory": str(slice_dir), "production_pods": len(placement["pods"])}
    state_write(state_dir, state)
    applied = kubectl(state, "apply", "-f", str(slice_dir / "kubernetes" / "production.yaml"), timeout_s=300)
    say(f"kalena lab: kubectl apply: {len(applied.stdout.splitlines())} objects of the slice's production; "
        f"production binder pid {proc.pid}")
    return state


def play(state_dir: Path, *, say: Callable[[str], None] = print, sleep: Callable[[float], None] = time.sleep) -> int:
    """Create each arrival of the slice's ``batch-schedule.json`` at its ``at_s`` (seconds after
    the play starts) with ``kubectl create -f``; returns how many were created.

    Raises:
        LabError: no lab, a lab without a slice, or a play already running.
    """
    from agents.lab.state import alive

    state = state_read(state_dir)
    if state is None or state.get("orchestrator") != "kubernetes":
        raise LabError("no Kubernetes-mode lab is recorded here", source=str(state_dir / "lab.json"),
                       field="kalena lab play", accepted="`kalena lab up --orchestrator kubernetes` first")
    if not state.get("slice"):
        raise LabError("the lab was started without a slice (--no-slice)", source=str(state_dir / "lab.json"),
                       field="kalena lab play", accepted="`kalena lab up` with its slice")
    running = [r for r in state["processes"] if r["name"] == PLAY and alive(r.get("process"))]
    if running:
        raise LabError(f"a play is already running (pid {running[0]['process']['pid']})", source="kalena lab play",
                       field="play", accepted="wait for it, or `kalena lab down`")
    schedule = json.loads((Path(state["slice"]["directory"]) / "batch-schedule.json").read_text())
    arrivals = schedule["arrivals"]
    state["processes"] = [r for r in state["processes"] if r["name"] != PLAY]
    state["processes"].append(_record(PLAY, state["apiserver"]["address"], Path(state["logs"]) / "play.log",
                                      os.getpid(), sys.argv, "the day's batch: each arrival of batch-schedule.json "
                                      "created with kubectl create -f at its offset"))
    state["play"] = {"started_s": time.time(), "arrivals": len(arrivals), "speed": schedule.get("speed")}
    state_write(state_dir, state)
    start = time.monotonic()
    try:
        _play_arrivals(state, arrivals, start, say, sleep)
    finally:
        _play_finished(state_dir)
    pods = sum(a["pods"] for a in arrivals)
    say(f"play: done — {len(arrivals)} arrival(s), {pods} batch pod(s) submitted in "
        f"{time.monotonic() - start:.1f} s")
    return len(arrivals)


def _play_arrivals(state, arrivals, start, say, sleep) -> None:
    from agents.lab.kubernetes import kubectl

    for i, arrival in enumerate(arrivals, start=1):
        wait = arrival["at_s"] - (time.monotonic() - start)
        if wait > 0:
            sleep(wait)
        done = kubectl(state, "create", "-f", str(Path(state["slice"]["directory"]) / arrival["file"]), check=False)
        outcome = done.stdout.strip() or done.stderr.strip()
        say(f"play: [{i}/{len(arrivals)}] t+{time.monotonic() - start:6.1f} s (at {arrival['at_s']:.1f} s) "
            f"{arrival['kind']} {arrival['name']} × {arrival['pods']} pod(s): {outcome}")


def _play_finished(state_dir: Path) -> None:
    """Mark the play's record completed (``status`` then reports it done, not down)."""
    state = state_read(state_dir)
    if state is None:   # `down` ran meanwhile
        return
    for record in state.get("processes", []):
        if record["name"] == PLAY and (record.get("process") or {}).get("pid") == os.getpid():
            record["process"] = None
    state.setdefault("play", {})["finished_s"] = time.time()
    state_write(state_dir, state)
