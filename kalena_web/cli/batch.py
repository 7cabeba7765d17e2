"""``kalena batch submit|list|show|complete|delete``: batch pods of a live cluster from the
command line, with exactly the REST API's checks and errors (the same services:
:func:`~kalena_web.scheduling.services.batch_submit`, ``batch_complete``, ``batch_delete``; the
same IR resource blocks; the same answer shape with ``--json``).

Exit status: 0 done, 2 refused (the message names the field and what is accepted; nothing
changed).
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
import time
from typing import Any

from kalena_engine.errors import InputError
from kalena_web.cli.persist import django_setup


class BatchCommandError(InputError):
    """A ``kalena batch`` argument that cannot be used (unknown cluster or pod, malformed flag)."""


def add_parser(commands: argparse._SubParsersAction) -> argparse.ArgumentParser:
    parser = commands.add_parser("batch", help="batch pods of a live cluster: submit, list, show, complete, delete",
                                 description="Batch pods as the REST API sees them (same checks, same errors). "
                                             "Quantities are Kuberina IR units: cpu in cores, ram as 2Gi.")
    actions = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
    sub = actions.add_parser("submit", help="queue a batch pod",
                             description="Queue NAME (namespace/pod) with its request, limit, priority, labels, "
                                         "constraints, image and command (Docker, Swarm start that container).")
    sub.add_argument("cluster")
    sub.add_argument("name", help="namespace/pod")
    sub.add_argument("--request", required=True, help="IR resource block: cpu=0.5,ram=512Mi (or JSON)")
    sub.add_argument("--limit", help="IR resource block (default: the request)")
    sub.add_argument("--owner", default="", help="job or owner (cooldowns key on it; default: the pod)")
    sub.add_argument("--priority", type=int, default=0)
    sub.add_argument("--label", action="append", default=[], metavar="KEY=VALUE")
    sub.add_argument("--constraints", default="{}", help="JSON: node_selector, node_affinity, tolerations, anti_affinity_terms, spread")
    sub.add_argument("--image", default="")
    sub.add_argument("--gang", default="")
    sub.add_argument("--min-member", type=int)
    sub.add_argument("--json", action="store_true", help="print the pod as the REST API answers it")
    sub.add_argument("--command", default="", help="the container's command, split like a shell: "
                                                   "--command \"sh -c 'sleep 60'\" (Docker, Swarm)")
    sub.set_defaults(handler=handle_submit)
    ls = actions.add_parser("list", help="batch pods in one state, oldest first")
    ls.add_argument("cluster")
    ls.add_argument("--state", default="pending", help="pending | bound | completed | refused | deleted")
    ls.add_argument("--json", action="store_true")
    ls.set_defaults(handler=handle_list)
    show = actions.add_parser("show", help="one pod: state, node, why pending, why evicted")
    show.add_argument("cluster")
    show.add_argument("name")
    show.add_argument("--json", action="store_true")
    show.set_defaults(handler=handle_show)
    done = actions.add_parser("complete", help="report a placed pod completed (refused where the orchestrator "
                                               "observes completion: kubernetes, docker, swarm)")
    done.add_argument("cluster")
    done.add_argument("name")
    done.add_argument("--json", action="store_true")
    done.set_defaults(handler=handle_complete)
    delete = actions.add_parser("delete", help="delete a pod (a running one is stopped first)")
    delete.add_argument("cluster")
    delete.add_argument("name")
    delete.add_argument("--json", action="store_true")
    delete.set_defaults(handler=handle_delete)
    return parser


def _block_arg(text: str | None, flag: str) -> dict[str, Any] | None:
    if text is None:
        return None
    text = text.strip()
    if text.startswith("{"):
        try:
            value = json.loads(text)
        except json.JSONDecodeError as exc:
            raise BatchCommandError(f"{text[:60]!r} is not JSON ({exc.msg})", field=flag) from None
        if not isinstance(value, dict):
            raise BatchCommandError("a resource block is a JSON object", field=flag)
        return value
    out: dict[str, Any] = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        key, sep, value = part.partition("=")
        if not sep or not key.strip() or not value.strip():
            raise BatchCommandError(f"{part!r} is not dimension=quantity", field=flag,
                                    accepted="cpu=0.5,ram=512Mi (IR units) or a JSON object")
        out[key.strip()] = value.strip()
    return out


def _cluster(name: str):  # type: ignore[no-untyped-def]
    from kalena_web.inventory.models import Cluster
    from kalena_web.scheduling import selectors

    try:
        return selectors.live_cluster(name=name)
    except Cluster.DoesNotExist:
        raise BatchCommandError(f"no live cluster named {name!r}", field="cluster") from None


def _pod(cluster, name: str):  # type: ignore[no-untyped-def]
    from kalena_web.scheduling import selectors
    from kalena_web.scheduling.models import BatchPod

    try:
        return selectors.batch_pod(cluster=cluster, name=name)
    except BatchPod.DoesNotExist:
        raise BatchCommandError(f"no batch pod {name!r} in {cluster.name!r}", field="name") from None


def _print(pod, as_json: bool, extra: dict[str, Any] | None = None) -> None:  # type: ignore[no-untyped-def]
    from kalena_web.scheduling.api import pod_out

    out = pod_out(pod).dict()
    out.update(outcome=pod.outcome, reason=pod.reason, ended_s=pod.ended_s)
    out.update(extra or {})
    if as_json:
        print(json.dumps(out, sort_keys=True))
        return
    where = f" on {out['node']}" if out["node"] else ""
    line = f"{out['name']}: {out['state']}{where}, priority {out['priority']}, request {out['request']}"
    if out["requeues"]:
        line += f", requeued {out['requeues']}×"
    if pod.outcome:
        line += f", {pod.outcome}" + (f" ({pod.reason})" if pod.reason else "")
    if out["binding"]:
        line += f", pending on {out['binding']}"
    print(line)
    for record in (extra or {}).get("why_evicted", []):
        print(f"  evicted from {record['node']} at {record['time_s']:.0f}: {record['cause']} "
              f"({record['dimension'] or '-'}) {json.dumps(record['detail'], sort_keys=True)}")
    if (extra or {}).get("why_pending"):
        print(f"  why pending: {json.dumps(extra['why_pending'], sort_keys=True)}")


def handle_submit(args: argparse.Namespace) -> int:
    try:
        command = shlex.split(args.command)
    except ValueError as exc:
        raise BatchCommandError(f"{args.command[:60]!r}: {exc}", field="--command") from None
    labels = {}
    for item in args.label:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise BatchCommandError(f"{item!r} is not KEY=VALUE", field="--label")
        labels[key] = value
    try:
        constraints = json.loads(args.constraints)
    except json.JSONDecodeError as exc:
        raise BatchCommandError(f"not JSON ({exc.msg})", field="--constraints") from None
    if not isinstance(constraints, dict):
        raise BatchCommandError("constraints are a JSON object", field="--constraints")
    django_setup()
    from django.conf import settings

    from kalena_web.scheduling import services
    from kalena_web.scheduling.tasks import scheduling_request

    cluster = _cluster(args.cluster)
    queued = services.batch_queue(
        cluster=cluster, orchestrator_kind=settings.KALENA_ORCHESTRATOR, name=args.name, owner=args.owner,
        request=_block_arg(args.request, "request"), limit=_block_arg(args.limit, "limit"), priority=args.priority,
        labels=labels, constraints=constraints, image=args.image, command=command, gang=args.gang,
        min_member=args.min_member, now_s=time.time(), wake=scheduling_request)
    if not queued.created:
        print(f"{args.name} was already submitted with this spec; nothing changed", file=sys.stderr)
    _print(_pod(cluster, queued.pod.workload.name), args.json)
    return 0


def handle_list(args: argparse.Namespace) -> int:
    django_setup()
    from kalena_web.scheduling.models import BatchPod

    if args.state not in dict(BatchPod.STATES):
        raise BatchCommandError(f"unknown state {args.state!r}", field="--state", accepted=", ".join(dict(BatchPod.STATES)))
    cluster = _cluster(args.cluster)
    pods = (BatchPod.objects.filter(cluster=cluster, state=args.state)
            .select_related("workload", "workload__node", "why_pending").order_by("queued_s", "id"))
    if args.json:
        from kalena_web.scheduling.api import pod_out

        print(json.dumps([pod_out(p).dict() for p in pods], sort_keys=True))
        return 0
    for pod in pods:
        _print(pod, False)
    if not pods:
        print(f"no {args.state} batch pods in {cluster.name!r}", file=sys.stderr)
    return 0


def handle_show(args: argparse.Namespace) -> int:
    django_setup()
    from kalena_web.archive.models import EvictionRecord

    cluster = _cluster(args.cluster)
    pod = _pod(cluster, args.name)
    why = getattr(pod, "why_pending", None)
    evicted = [{"node": r.node.name, "time_s": r.time_s, "cause": r.cause, "dimension": r.dimension,
                "detail": r.detail}
               for r in EvictionRecord.objects.filter(cluster=cluster, workload_name=pod.workload.name)
               .select_related("node").order_by("time_s")]
    _print(pod, args.json, {"why_pending": why.record if why else None, "why_evicted": evicted})
    return 0


def handle_complete(args: argparse.Namespace) -> int:
    django_setup()
    from django.conf import settings

    from kalena_web.scheduling import services

    cluster = _cluster(args.cluster)
    pod = _pod(cluster, args.name)
    services.batch_complete(pod=pod, orchestrator_kind=settings.KALENA_ORCHESTRATOR, now_s=time.time())
    _print(_pod(cluster, args.name), args.json)
    return 0


def handle_delete(args: argparse.Namespace) -> int:
    django_setup()
    from kalena_web.control.orchestrators import orchestrator_for
    from kalena_web.scheduling import services

    cluster = _cluster(args.cluster)
    pod = _pod(cluster, args.name)
    services.batch_delete(pod=pod, orchestrator=lambda: orchestrator_for(cluster), now_s=time.time(),
                          by="from the command line")
    _print(_pod(cluster, args.name), args.json)
    return 0
