"""``kalena lab up --orchestrator kubernetes`` (and its ``status``): the lab as a Kubernetes
cluster — the lab's API server, ``deploy/kubernetes`` applied with Debian's kubectl, the control
plane and agents started from the applied objects, a kubelet double per node (docs/lab.md,
:mod:`agents.lab.kubernetes`). This module is the console side: the operator's step after the
migration Job (the live cluster the agents' TokenReview names), run in the migrated database.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

from kalena_web.cli.paths import PROJECT_ROOT


def add_kubernetes_arguments(up: argparse.ArgumentParser) -> None:
    up.add_argument("--orchestrator", choices=("docker", "kubernetes"), default="docker",
                    help="docker: a private engine per node and `kalena serve` on SQLite; kubernetes: the lab's API "
                         "server, deploy/kubernetes applied with kubectl, the control plane from the applied objects, "
                         "a kubelet double per node (docs/lab.md)")
    up.add_argument("--database-url", default=None,
                    help="kubernetes: a PostgreSQL server URL on which the lab makes its own database "
                         "(kalena_labdb_<name>; default: $DATABASE_URL's server, else a SQLite file in the state folder)")
    up.add_argument("--redis-url", default=None,
                    help="kubernetes: the control plane's Redis (Celery broker, channel layer; default $REDIS_URL)")
    up.add_argument("--manifests", nargs="*", type=Path, default=[], metavar="FILE",
                    help="kubernetes: more manifests applied after the deploy files (production, batch)")


def operator_step(env: dict[str, str], cluster: str) -> None:
    """Create the live cluster ``cluster`` in the database ``env`` names (what an operator does
    after the migration Job: `kalena cluster import`, here an empty cluster the watch fills)."""
    code = ("import django; django.setup()\n"
            "from kalena_web.control.services import live_cluster_create\n"
            f"live_cluster_create(name={cluster!r})\n")
    subprocess.run([sys.executable, "-c", code], env=env, cwd=PROJECT_ROOT, check=True, capture_output=True,
                   timeout=120)


def handle_up_kubernetes(args: argparse.Namespace, plan, state_dir: Path) -> int:
    from agents.lab.kubernetes import lab_up_kubernetes

    database = args.database_url if args.database_url is not None else os.environ.get("DATABASE_URL", "")
    redis = args.redis_url if args.redis_url is not None else os.environ.get("REDIS_URL", "")
    print(f"kalena lab: Kubernetes mode, {len(plan.nodes)} node(s) × {plan.nodes[0].cpu_mcpu} m / "
          f"{plan.nodes[0].memory_bytes // 2**20} MiB of the budget {plan.cpu_budget_mcpu} m / "
          f"{plan.memory_budget_bytes // 2**20} MiB; state in {state_dir}", flush=True)
    state = lab_up_kubernetes(plan, state_dir=state_dir, database_url=database, redis_url=redis,
                              operator=operator_step, manifests=[m.resolve() for m in args.manifests],
                              sampling_interval_s=args.sampling_interval_s,
                              say=lambda line: print(line, flush=True))
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
