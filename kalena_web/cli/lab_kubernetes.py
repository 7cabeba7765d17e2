"""``kalena lab up --orchestrator kubernetes`` (and its ``status``): the lab as a Kubernetes
cluster — the lab's API server, ``deploy/kubernetes`` applied with Debian's kubectl, the control
plane and agents started from the applied objects, a kubelet double per node (docs/lab.md,
:mod:`agents.lab.kubernetes`). This module is the console side: the operator's step after the
migration Job (the live cluster the agents' TokenReview names), run in the migrated database.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from kalena_web.cli.argtypes import POSITIVE
from kalena_web.cli.paths import PROJECT_ROOT

SLICE_OPTIONS = ("speed", "seed", "load_factor", "hours", "max_pods_per_node", "max_batch_pods", "infra", "workloads",
                 "blueprint", "usage_dir", "batch_trace", "google_events", "google_usage")


def add_kubernetes_arguments(up: argparse.ArgumentParser) -> None:
    up.add_argument("--orchestrator", choices=("docker", "swarm", "kubernetes"), default="docker",
                    help="docker: a private engine per node, standalone, and `kalena serve` on SQLite; swarm: the "
                         "nodes' engines joined into one Swarm; kubernetes: the lab's API "
                         "server, deploy/kubernetes applied with kubectl, the control plane from the applied objects, "
                         "a kubelet double per node (docs/lab.md)")
    up.add_argument("--database-url", default=None,
                    help="kubernetes: a PostgreSQL server URL on which the lab makes its own database "
                         "(kalena_labdb_<name>; default: $DATABASE_URL's server, else a SQLite file in the state folder)")
    up.add_argument("--redis-url", default=None,
                    help="kubernetes: the control plane's Redis (Celery broker, channel layer; default $REDIS_URL)")
    up.add_argument("--manifests", nargs="*", type=Path, default=[], metavar="FILE",
                    help="kubernetes: more manifests applied after the deploy files (production, batch)")
    up.add_argument("--policy", type=Path, default=None, metavar="FILE",
                    help="kubernetes: a policy file (docs/policy.md) on the trace's clock, checked before anything "
                         "starts; with a slice every time constant is divided by --speed (floored, printed) and the "
                         "result saved as the live cluster's policy before anything is scheduled")
    day = up.add_argument_group("kubernetes: the slice the lab loads (docs/lab.md \"The slice in the lab\")")
    day.add_argument("--no-slice", action="store_true",
                     help="an empty lab: no blueprint slice, no production, no batch schedule")
    day.add_argument("--speed", type=POSITIVE, default=None, help="time compression k of the slice (10)")
    day.add_argument("--seed", type=int, default=None, help="the slice's seed (0)")
    day.add_argument("--load-factor", type=POSITIVE, default=None,
                     help="batch cpu demand over the lab's slack (1.0)")
    day.add_argument("--hours", type=POSITIVE, default=None, help="hours of trace time the day covers (6)")
    day.add_argument("--max-pods-per-node", type=int, default=None,
                     help="take only blueprint nodes with at most this many production pods (16)")
    day.add_argument("--max-batch-pods", type=int, default=None, help="about this many batch pods (300)")
    for flag, dest in (("--ir", "workloads"), ("--infra", "infra"), ("--blueprint", "blueprint"),
                       ("--usage-dir", "usage_dir"), ("--batch-trace", "batch_trace"),
                       ("--google-events", "google_events"), ("--google-usage", "google_usage")):
        day.add_argument(flag, dest=dest, default=None, help=f"slice input (as `kalena lab slice {flag}`)")


def operator_step(env: dict[str, str], cluster: str) -> None:
    """Create the live cluster ``cluster`` in the database ``env`` names (what an operator does
    after the migration Job: `kalena cluster import`, here an empty cluster the watch fills)."""
    code = ("import django; django.setup()\n"
            "from kalena_web.control.services import live_cluster_create\n"
            f"live_cluster_create(name={cluster!r})\n")
    subprocess.run([sys.executable, "-c", code], env=env, cwd=PROJECT_ROOT, check=True, capture_output=True,
                   timeout=120)


def import_step(ir_dir: Path):
    """The operator's step for a lab that loads a slice: `kalena cluster import` of the slice's
    IR (infra, workloads, blueprint) as the live cluster, in the migrated database."""
    def step(env: dict[str, str], cluster: str) -> None:
        done = subprocess.run([sys.executable, "-m", "kalena_web.cli", "cluster", "import", cluster,
                               "--infra", str(ir_dir / "infra.yaml"), "--workloads", str(ir_dir / "workloads.yaml"),
                               "--blueprint", str(ir_dir / "blueprint.yaml")], env=env, cwd=PROJECT_ROOT,
                              capture_output=True, text=True, timeout=300, check=False)
        if done.returncode != 0:
            from agents.lab.errors import LabError

            raise LabError(f"kalena cluster import failed: {(done.stderr or done.stdout).strip()[-600:]}",
                           source=str(ir_dir), field="operator")
        print(f"kalena lab: {done.stdout.strip()}", flush=True)
    return step


def compress_day(args: argparse.Namespace, policy_text: str | None, slice_dir: Path) -> dict:
    """The day's time compression (docs/lab.md "Time compression"): the operator's policy (or
    the default) with every time constant ÷ the slice's speed, floored; the agents' clocks and
    the pods' grace likewise; the slack buckets × the slice's node scale (:func:`scale_sizes`). Printed, written to ``<slice>/compression.json`` and
    ``<slice>/policy-scaled.yaml`` (the live cluster's first policy) and returned as
    ``{"policy_text", "agent_flags", "compression"}``."""
    from dataclasses import replace

    from kalena_engine.labslice.compression import compress, format_clocks, scale_sizes
    from kalena_engine.policy_file import PolicyDocument, PolicyMetadata, dump_policy_text, parse_policy_text

    speed = float(args.speed) if getattr(args, "speed", None) is not None else 10.0
    document = parse_policy_text(policy_text, source=str(args.policy)) if policy_text is not None else PolicyDocument()
    compression = compress(document.policy, speed)
    scale = json.loads((slice_dir / "summary.json").read_text())["scale"]
    compression = replace(compression, policy=scale_sizes(compression.policy, cpu_scale=scale["cpu"],
                                                          memory_scale=scale["memory"]))
    meta = PolicyMetadata(name=f"{document.metadata.name}-x{speed:g}", version=1,
                          source=f"kalena lab: {args.policy if policy_text is not None else 'the default policy'} "
                                 f"with every time constant ÷ {speed:g} (floored)")
    text = dump_policy_text(PolicyDocument(policy=compression.policy, metadata=meta))
    (slice_dir / "policy-scaled.yaml").write_text(text, encoding="utf-8")
    (slice_dir / "compression.json").write_text(json.dumps(compression.to_dict(), indent=2), encoding="utf-8")
    print(format_clocks(compression), flush=True)
    buckets = compression.policy.placement.slack_buckets
    print(f"kalena lab: slack buckets (the published batch capacity's step) × the node scale: cpu {buckets[0]:.3g} m, "
          f"memory {buckets[1] / 2**20:.3g} MiB", flush=True)
    print(f"kalena lab: the scaled policy ({slice_dir / 'policy-scaled.yaml'}) is the live cluster's first policy; "
          f"agents run with {' '.join(compression.agent_flags())}", flush=True)
    return {"policy_text": text, "agent_flags": compression.agent_flags(), "compression": compression}


def policy_step(step, policy_text: str, source: str):
    """``step`` (the operator's step), then ``policy_text`` saved as the live cluster's policy
    (a version by ``kalena lab``), in the migrated database, before the scheduler acts."""
    def both(env: dict[str, str], cluster: str) -> None:
        step(env, cluster)
        code = ("import sys\nimport django\ndjango.setup()\n"
                "from kalena_engine.policy_file import parse_policy_text\n"
                "from kalena_web.inventory.models import Cluster\n"
                "from kalena_web.policy.services import policy_version_create\n"
                "policy_version_create(cluster=Cluster.objects.get(name=sys.argv[1]), "
                "document=parse_policy_text(sys.argv[2], source=sys.argv[3]), user='kalena lab')\n")
        done = subprocess.run([sys.executable, "-c", code, cluster, policy_text, source], env=env, cwd=PROJECT_ROOT,
                              capture_output=True, text=True, timeout=120, check=False)
        if done.returncode != 0:
            from agents.lab.errors import LabError

            raise LabError(f"saving the policy failed: {done.stderr.strip()[-600:]}", source=source, field="--policy")
        print(f"kalena lab: policy {source} saved as the cluster's policy", flush=True)
    return both


def handle_up_kubernetes(args: argparse.Namespace, plan, state_dir: Path) -> int:
    from agents.lab.state import state_read

    operator = operator_step
    policy_text = None
    if getattr(args, "policy", None) is not None:   # refused before anything starts
        from kalena_engine.errors import InputError
        from kalena_engine.policy_file import parse_policy_text

        try:
            policy_text = args.policy.read_text(encoding="utf-8")
        except OSError as exc:
            raise InputError(f"cannot read it ({exc.strerror})", source=str(args.policy), field="--policy",
                             accepted="a readable policy file (docs/policy.md)") from None
        parse_policy_text(policy_text, source=str(args.policy))
    created = not state_dir.exists()
    try:
        return _up_kubernetes(args, plan, state_dir, operator=operator, policy_text=policy_text)
    except BaseException:
        # a refused `up` (a missing data file, a port in use, no Redis…) leaves no state folder it
        # made (docs/lab.md); a rolled-back start keeps its logs there, so only an empty one goes
        if created and state_read(state_dir) is None:
            shutil.rmtree(state_dir / "slice", ignore_errors=True)
            with contextlib.suppress(OSError):
                state_dir.rmdir()
        raise


def _up_kubernetes(args: argparse.Namespace, plan, state_dir: Path, *, operator, policy_text: str | None) -> int:
    from agents.lab.errors import LabRunning
    from agents.lab.kubernetes import lab_down_kubernetes, lab_up_kubernetes
    from agents.lab.state import state_read

    slice_dir = None
    agent_flags: tuple[str, ...] = ()
    if not getattr(args, "no_slice", False):
        from agents.lab.day import render_for_lab
        from kalena_web.cli.paths import data_root

        if state_read(state_dir) is not None:
            raise LabRunning(f"a lab is already recorded in {state_dir}", source=str(state_dir / "lab.json"),
                             field="kalena lab up", accepted="`kalena lab down` first, or another --state-dir")
        state_dir.mkdir(parents=True, exist_ok=True)
        slice_dir = render_for_lab(name=plan.name, nodes=len(plan.nodes), cpu_m=plan.nodes[0].cpu_mcpu,
                                   memory_mib=plan.nodes[0].memory_bytes // 2**20, out_dir=state_dir / "slice",
                                   options={k: getattr(args, k, None) for k in SLICE_OPTIONS}, data_root=data_root(),
                                   say=lambda line: print(line, flush=True))
        operator = import_step(slice_dir / "ir")
        compression = compress_day(args, policy_text, slice_dir)
        policy_text = compression["policy_text"]
        args.policy = args.policy or Path("<default policy>")
        agent_flags = compression["agent_flags"]
    if policy_text is not None:
        operator = policy_step(operator, policy_text, str(args.policy))
    database = args.database_url if args.database_url is not None else os.environ.get("DATABASE_URL", "")
    redis = args.redis_url if args.redis_url is not None else os.environ.get("REDIS_URL", "")
    print(f"kalena lab: Kubernetes mode, {len(plan.nodes)} node(s) × {plan.nodes[0].cpu_mcpu} m / "
          f"{plan.nodes[0].memory_bytes // 2**20} MiB of the budget {plan.cpu_budget_mcpu} m / "
          f"{plan.memory_budget_bytes // 2**20} MiB; state in {state_dir}", flush=True)
    try:
        state = lab_up_kubernetes(plan, state_dir=state_dir, database_url=database, redis_url=redis,
                                  operator=operator, manifests=[m.resolve() for m in args.manifests],
                                  sampling_interval_s=args.sampling_interval_s, agent_flags=agent_flags,
                                  say=lambda line: print(line, flush=True))
    except BaseException:
        # refused (a port in use, no Redis…) or rolled back: nothing of this `up` is left, its slice neither
        if slice_dir is not None and state_read(state_dir) is None:
            shutil.rmtree(slice_dir, ignore_errors=True)
        raise
    if slice_dir is not None:
        from agents.lab.day import load_production

        try:
            state = load_production(state_dir, slice_dir, say=lambda line: print(line, flush=True))
        except BaseException:
            print("kalena lab: loading the slice failed; stopping what was started", flush=True)
            lab_down_kubernetes(state_dir, say=lambda line: print(line, flush=True))
            raise
        print("kalena lab: the day's batch is `kalena lab play` (batch-schedule.json, "
              f"{slice_dir / 'batch-schedule.json'})", flush=True)
    from agents.lab.sampler import sampler_start

    sampler = sampler_start(state_dir)
    print(f"kalena lab: sampler pid {sampler['process']['pid']} writing {state_dir / 'metrics.jsonl'}", flush=True)
    print(f"kalena lab: up — {len(state['nodes'])} nodes, API server {state['apiserver']['url']}, console "
          f"{state['console']['url']}; kubectl: KUBECONFIG={state['kubeconfig']}; `kalena lab status` / `kalena lab down`")
    return 0


def handle_status_kubernetes(args: argparse.Namespace, state: dict) -> int:
    from agents.lab.status import format_status_kubernetes, lab_status_kubernetes

    report = lab_status_kubernetes(state)
    print(json.dumps(report, indent=2) if args.json else format_status_kubernetes(report))
    healthy = report["apiserver"]["alive"] and all(p["alive"] for p in report["processes"]) and all(
        n["engine"]["answers"] and n["agent"]["alive"] and (n.get("kubelet") or {}).get("alive") for n in report["nodes"])
    return 0 if healthy else 1
