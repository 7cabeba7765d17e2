"""``kalena get nodes CLUSTER``: a live cluster's nodes with their slack, kubectl-style (a table
by default, ``-o wide`` for requests, reservations and usage, ``-o json|yaml`` for the numbers).

Slack is ``C − Σ reservations`` per node (the reservation ledger, cpu in cores, ram in GiB);
headroom ``C − Σ production requests``. Exit status: 0 done, 1 no such cluster.
"""

from __future__ import annotations

import argparse
import time

from kalena_web.cli.batch import GIB, BatchNotFound
from kalena_web.cli import remote
from kalena_web.cli.output import add_output_flag, age, dump, quantity, table
from kalena_web.cli.persist import django_setup


def add_parser(commands: argparse._SubParsersAction) -> argparse.ArgumentParser:
    parser = commands.add_parser("get", help="a live cluster's nodes with their slack (kalena get nodes CLUSTER)",
                                 description="Objects of a live cluster as a table, kubectl-style.")
    kinds = parser.add_subparsers(dest="kind", required=True, metavar="KIND")
    nodes = kinds.add_parser("nodes", aliases=["node", "no"], help="nodes with slack, headroom, batch and telemetry")
    nodes.add_argument("cluster")
    add_output_flag(nodes)
    remote.add_flags(nodes)
    nodes.set_defaults(handler=handle_nodes)
    return parser


def _row(node, now_s: float) -> dict:  # type: ignore[no-untyped-def]
    led = node.live_ledger
    cap, reserved = led.capacity, [a + b for a, b in zip(led.prod_reservation, led.batch_reservation, strict=True)]
    return {
        "name": node.name, "ready": node.condition.ready if hasattr(node, "condition") else None,
        # cordoned (Kubernetes) or drained / paused (Swarm): takes no new pods
        "schedulable": node.condition.schedulable if hasattr(node, "condition") else None,
        "stale": led.stale, "last_sample_s": led.last_sample_s,
        "capacity": {"cpu": cap[0] / 1000.0, "ram": cap[1] / GIB},
        "slack": {"cpu": (cap[0] - reserved[0]) / 1000.0, "ram": (cap[1] - reserved[1]) / GIB},
        "headroom": {"cpu": (cap[0] - led.prod_request[0]) / 1000.0, "ram": (cap[1] - led.prod_request[1]) / GIB},
        "requests": {"cpu": (led.prod_request[0] + led.batch_request[0]) / 1000.0,
                     "ram": (led.prod_request[1] + led.batch_request[1]) / GIB},
        "reservations": {"cpu": reserved[0] / 1000.0, "ram": reserved[1] / GIB},
        "usage": {"cpu": led.usage[0] / 1000.0, "ram": led.usage[1] / GIB},
        "batch_pods": node.batch_pods, "age_s": None if led.last_sample_s is None else now_s - led.last_sample_s,
    }


def handle_nodes(args: argparse.Namespace) -> int:
    if remote.server(args):
        return remote.get_nodes(args)
    django_setup()
    from django.db.models import Count, Q

    from kalena_web.inventory.models import Cluster, Node

    try:
        cluster = Cluster.objects.get(kind=Cluster.LIVE, name=args.cluster)
    except Cluster.DoesNotExist:
        raise BatchNotFound(f"no live cluster named {args.cluster!r}", field="cluster") from None
    nodes = (Node.objects.filter(cluster=cluster).select_related("live_ledger", "condition").order_by("name")
             .annotate(batch_pods=Count("production", filter=Q(production__kind="batch"))))
    now = time.time()
    print_nodes([_row(n, now) for n in nodes], args.output)
    return 0


def status(row: dict) -> str:
    """kubectl's STATUS: ``Ready``, ``NotReady`` or ``Stale`` (no fresh sample from the node's
    agent), with ``,SchedulingDisabled`` when the node takes no new pods (cordoned, or a Swarm
    node drained or paused): ``Ready,SchedulingDisabled``."""
    text = "Stale" if row["stale"] else ("Ready" if row["ready"] in (True, None) else "NotReady")
    return text + (",SchedulingDisabled" if row.get("schedulable") is False else "")


def print_nodes(rows: list[dict], output: str) -> None:
    """The node rows (``_row``'s keys; cpu in cores, ram in GiB) as ``output`` says."""
    if output in ("json", "yaml"):
        dump(rows, output)
        return

    def pair(key: str):
        return lambda r: f"{quantity(r[key]['cpu'])} / {quantity(r[key]['ram'])}Gi"

    cols = [("NAME", lambda r: r["name"]),
            ("STATUS", status),
            ("CPU SLACK", lambda r: quantity(r["slack"]["cpu"])), ("RAM SLACK", lambda r: quantity(r["slack"]["ram"], "Gi")),
            ("CAPACITY", pair("capacity")), ("BATCH", lambda r: r["batch_pods"]),
            ("LAST SAMPLE", lambda r: age(r["age_s"]) + " ago" if r["age_s"] is not None else "never")]
    if output == "wide":
        cols += [("HEADROOM", pair("headroom")), ("REQUESTS", pair("requests")),
                 ("RESERVATIONS", pair("reservations")), ("USAGE", pair("usage"))]
    table(rows, cols)
