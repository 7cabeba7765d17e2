"""``kalena cluster import NAME``: create a live cluster from Kuberina IR for the control plane."""

from __future__ import annotations

import argparse
import sys
import time

from kalena_engine.errors import InputError
from kalena_engine.kuberina import load_blueprint, load_infrastructure, load_workloads
from kalena_web.cli.inputs import DEFAULTS, warn_unresolved
from kalena_web.cli.paths import data_path
from kalena_web.cli.persist import django_setup


def add_parser(commands: argparse._SubParsersAction) -> argparse.ArgumentParser:
    parser = commands.add_parser("cluster", help="live clusters: import from Kuberina IR")
    actions = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
    imp = actions.add_parser("import", help="create a live cluster from infra, workloads and blueprint files",
                             description="Nodes at post-Phase-0 capacity, the blueprint's production pods with "
                                         "r = q until agents report usage. Refuses a blueprint with hard violations.")
    imp.add_argument("name", help="name of the live cluster (unique)")
    imp.add_argument("--infra", default=DEFAULTS["infra"], help="Kuberina infrastructure file")
    imp.add_argument("--workloads", default=DEFAULTS["workloads"], help="Kuberina workloads file")
    imp.add_argument("--blueprint", default=DEFAULTS["blueprint"], help="Kuberina solution (blueprint) file")
    imp.add_argument("--manifests", nargs="+", default=None, metavar="PATH",
                     help="Kubernetes manifests (files or folders of *.yaml: Nodes, Deployments, StatefulSets, "
                          "ReplicaSets, DaemonSets) instead of --infra/--workloads, read with Kubernetes' rules "
                          "(docs/kubernetes-admission.md)")
    imp.add_argument("--replace-blueprint", action="store_true",
                     help="adopt a re-plan: load the blueprint (and workloads) for the existing live cluster NAME, "
                          "keeping its archive, batch pods, ledgers and telemetry; production is re-charged where "
                          "the new blueprint puts it and fidelity findings it resolves are cleared (audited)")
    imp.set_defaults(handler=handle_import)
    delete = actions.add_parser("delete", help="delete a live cluster and everything recorded about it")
    delete.add_argument("name", help="name of the live cluster")
    delete.add_argument("--yes", action="store_true", help="do not ask for confirmation")
    delete.set_defaults(handler=handle_delete)
    return parser


def handle_import(args: argparse.Namespace) -> int:
    document_path = None
    if args.manifests:
        from agents.orchestrators.kubernetes.manifests import load_manifest_files

        manifests = load_manifest_files([data_path(p) for p in args.manifests])
        infra, workloads = manifests.infra, manifests.workloads
        for note in manifests.notes:
            print(f"note: {note}")
    else:
        infra = load_infrastructure(data_path(args.infra))
        workloads = load_workloads(data_path(args.workloads))
        warn_unresolved(workloads)
        document_path = data_path(args.workloads)
    blueprint = load_blueprint(data_path(args.blueprint), workloads)
    django_setup()
    if args.replace_blueprint:
        return _replace_blueprint(args, infra, workloads, blueprint, document_path)
    from kalena_web.control.services import live_cluster_import

    imported = live_cluster_import(name=args.name, infra=infra, workloads=workloads, blueprint=blueprint,
                                   now_s=time.time(),
                                   workloads_document=document_path.read_text(encoding="utf-8") if document_path else "")
    print(f"live cluster {args.name!r}: {imported.nodes} nodes, {imported.production} production pods "
          f"({imported.soft_violations} soft blueprint violations reported, none hard)")
    return 0


def _replace_blueprint(args: argparse.Namespace, infra, workloads, blueprint, document_path) -> int:
    import getpass

    from kalena_web.replan.services import live_cluster_blueprint_replace

    adopted = live_cluster_blueprint_replace(
        name=args.name, infra=infra, workloads=workloads, blueprint=blueprint, now_s=time.time(),
        actor_kind="user", actor=f"cli:{getpass.getuser()}",
        workloads_document=document_path.read_text(encoding="utf-8") if document_path else None)
    print(f"live cluster {args.name!r}: blueprint replaced by {blueprint.source} — {adopted.moved} production pods "
          f"moved, {adopted.recharged} re-charged, {adopted.resolved} fidelity findings resolved, "
          f"{adopted.findings} open ({adopted.soft_violations} soft blueprint violations reported, none hard)")
    return 0


def handle_delete(args: argparse.Namespace) -> int:
    django_setup()
    from kalena_web.control.services import live_cluster_delete

    from kalena_web.inventory.models import Cluster

    if not args.yes:
        if not Cluster.objects.filter(kind=Cluster.LIVE, name=args.name).exists():
            live_cluster_delete(name=args.name)  # raises InputError naming the live clusters there are
        if not sys.stdin.isatty():
            raise InputError("no terminal to confirm the deletion on", source="command line", field="--yes",
                             accepted="--yes to delete without asking")
        if input(f"delete live cluster {args.name!r} and all its data? [y/N] ").strip().lower() != "y":
            print("nothing deleted")
            return 1
    deleted = live_cluster_delete(name=args.name)
    print(f"live cluster {args.name!r} deleted ({deleted} rows)")
    return 0
