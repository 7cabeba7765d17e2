"""``kalena batch get|describe|submit|complete|delete``: batch pods of a live cluster from the
command line, with exactly the REST API's checks and errors (the same services:
:func:`~kalena_web.scheduling.services.batch_submit`, ``batch_complete``, ``batch_delete``; the
same IR resource blocks). Output as kubectl's: a table by default, ``-o wide`` for more columns,
``-o json|yaml`` for the REST API's answer (``--json`` is ``-o json``); ``describe`` reads as
sentences, why pending and why evicted in words.

Exit status: 0 done, 1 not found (no such cluster or pod), 2 refused (the message names the
field and what is accepted; nothing changed).

Two paths, the same output: with ``--server URL`` (or ``KALENA_SERVER``) and an API token, a thin
HTTP client of that console's REST API (:mod:`kalena_web.cli.remote`: standard library only, a
fraction of a second a call); without, the database directly (Django set up in this process,
seconds a call). Every heavy import (Django, numpy, the REST schemas) happens inside the
database path's handlers, so ``kalena batch`` pays for nothing else at start-up.
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
import time
from typing import Any

from kalena_engine.errors import InputError
from kalena_web.cli.output import add_output_flag, age, dump, quantity, table
from kalena_web.cli import remote
from kalena_web.cli.persist import django_setup


class BatchCommandError(InputError):
    """A ``kalena batch`` argument that cannot be used (malformed flag); exit status 2."""


class BatchNotFound(BatchCommandError):
    """No such live cluster or batch pod; exit status 1 (kubectl's NotFound)."""

    exit_code = 1


STATES_HELP = "pending | bound | completed | refused | deleted | all"
GIB = float(2**30)


def add_parser(commands: argparse._SubParsersAction) -> argparse.ArgumentParser:
    parser = commands.add_parser("batch", help="batch pods of a live cluster: get, describe, submit, complete, delete",
                                 description="Batch pods as the REST API sees them (same checks, same errors). "
                                             "Quantities are Kuberina IR units: cpu in cores, ram as 2Gi. Exit "
                                             "status 0 done, 1 not found, 2 refused.")
    actions = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
    get = actions.add_parser("get", help="batch pods as a table (or one pod), kubectl-style")
    get.add_argument("cluster")
    get.add_argument("name", nargs="?", help="one pod (namespace/pod); default: every pod in --state")
    get.add_argument("--state", default="", help=f"{STATES_HELP} (default: every state but deleted)")
    add_output_flag(get)
    remote.add_flags(get)
    get.set_defaults(handler=handle_get, default_state="")
    ls = actions.add_parser("list", help="batch pods in one state, oldest first (get with --state pending)")
    ls.add_argument("cluster")
    ls.add_argument("--state", default="pending", help=STATES_HELP)
    add_output_flag(ls)
    remote.add_flags(ls)
    ls.set_defaults(handler=handle_get, name=None, default_state="pending")
    for verb, help_ in (("describe", "one pod in words: state, node, times, why pending, why evicted"),
                        ("show", "the same as describe")):
        show = actions.add_parser(verb, help=help_)
        show.add_argument("cluster")
        show.add_argument("name")
        show.add_argument("-o", "--output", choices=("text", "json", "yaml"), default="text")
        show.add_argument("--json", dest="output", action="store_const", const="json", help="the same as -o json")
        remote.add_flags(show)
        show.set_defaults(handler=handle_describe)
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
    add_output_flag(sub)
    remote.add_flags(sub)
    sub.add_argument("--command", default="", help="the container's command, split like a shell: "
                                                   "--command \"sh -c 'sleep 60'\" (Docker, Swarm)")
    sub.set_defaults(handler=handle_submit)
    done = actions.add_parser("complete", help="report a placed pod completed (refused where the orchestrator "
                                               "observes completion: kubernetes, docker, swarm)")
    done.add_argument("cluster")
    done.add_argument("name")
    add_output_flag(done)
    remote.add_flags(done)
    done.set_defaults(handler=handle_complete)
    delete = actions.add_parser("delete", help="delete a pod (a running one is stopped first)")
    delete.add_argument("cluster")
    delete.add_argument("name")
    add_output_flag(delete)
    remote.add_flags(delete)
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
    """The live cluster ``name`` (read here rather than through the scheduling selectors, whose
    module loads the placement engine: a ``get`` does not need it)."""
    from kalena_web.inventory.models import Cluster

    try:
        return Cluster.objects.get(kind=Cluster.LIVE, name=name)
    except Cluster.DoesNotExist:
        raise BatchNotFound(f"no live cluster named {name!r}", field="cluster") from None


def _pod(cluster, name: str):  # type: ignore[no-untyped-def]
    from kalena_web.scheduling.models import BatchPod

    try:
        return BatchPod.objects.select_related("workload", "workload__node", "why_pending").get(
            cluster=cluster, workload__name=name)
    except BatchPod.DoesNotExist:
        raise BatchNotFound(f"no batch pod {name!r} in {cluster.name!r}", field="name") from None


def _columns(wide: bool, now_s: float) -> list:
    cols = [("NAME", lambda p: p.workload.name), ("STATE", lambda p: "running" if p.state == "bound" else p.state),
            ("NODE", lambda p: p.workload.node.name if p.workload.node_id else ""),
            ("PRIORITY", lambda p: p.workload.priority),
            ("CPU", lambda p: quantity(p.workload.request[0] / 1000.0)),
            ("RAM", lambda p: quantity(p.workload.request[1] / GIB, "Gi")),
            ("AGE", lambda p: age(now_s - p.submitted_s) if p.submitted_s else "")]
    if wide:
        cols += [("OWNER", lambda p: p.workload.owner), ("REQUEUES", lambda p: p.requeues),
                 ("WHY PENDING", lambda p: _why_text(p) if p.state == "pending" else ""),
                 ("OUTCOME", lambda p: (p.outcome or "") + (f" ({p.reason})" if p.reason else ""))]
    return cols


def _why_text(pod) -> str:  # type: ignore[no-untyped-def]
    """The WHY PENDING cell: the binding constraint in words, or the engine's words when a node
    refused to run the pod (``node-a: engine … run: … no such host``)."""
    from kalena_web.console.why import reason_text

    why = getattr(pod, "why_pending", None)
    if why is None:
        return ""
    refused = why.record.get("refused") or []
    if refused:
        return f"{refused[0]['node']} refused: {refused[0].get('error') or 'bind refused'}"
    return reason_text(why.binding)


def _answer(pod) -> dict[str, Any]:  # type: ignore[no-untyped-def]
    """The pod as the REST API answers it, with its outcome (``-o json|yaml``)."""
    from kalena_web.scheduling.api import pod_out

    out = pod_out(pod).dict()
    out.update(outcome=pod.outcome, reason=pod.reason, ended_s=pod.ended_s)
    return out


def _print(pod, fmt: str) -> None:  # type: ignore[no-untyped-def]
    """One pod after submit, complete or delete: a one-row table, or the REST answer."""
    if fmt in ("json", "yaml"):
        dump(_answer(pod), fmt)
    else:
        table([pod], _columns(fmt == "wide", time.time()))


def handle_get(args: argparse.Namespace) -> int:
    if remote.server(args):
        return remote.batch_get(args)
    django_setup()
    from kalena_web.scheduling.models import BatchPod

    state = args.state or args.default_state
    if state and state != "all" and state not in dict(BatchPod.STATES):
        raise BatchCommandError(f"unknown state {state!r}", field="--state",
                                accepted=", ".join([*dict(BatchPod.STATES), "all"]))
    cluster = _cluster(args.cluster)
    if args.name:
        pods = [_pod(cluster, args.name)]
    else:
        rows = BatchPod.objects.filter(cluster=cluster)
        if state == "":
            rows = rows.exclude(state=BatchPod.DELETED)
        elif state != "all":
            rows = rows.filter(state=state)
        pods = list(rows.select_related("workload", "workload__node", "why_pending").order_by("queued_s", "id"))
    if args.output in ("json", "yaml"):
        if args.name:
            dump(_answer(pods[0]), args.output)
        else:
            from kalena_web.scheduling.api import pod_out

            dump([pod_out(p).dict() for p in pods], args.output)
        return 0
    if not pods:
        print(f"No {state + ' ' if state not in ('', 'all') else ''}batch pods in {cluster.name}.", file=sys.stderr)
        return 0
    table(pods, _columns(args.output == "wide", time.time()))
    return 0


def _utc(unix_s: float | None) -> str:
    from kalena_web.console.formatting import utc

    return f"{utc(unix_s)} UTC" if unix_s is not None else "<none>"


def handle_describe(args: argparse.Namespace) -> int:
    if remote.server(args):
        return remote.batch_describe(args)
    django_setup()
    from kalena_web.archive.models import EvictionRecord

    cluster = _cluster(args.cluster)
    pod = _pod(cluster, args.name)
    why = getattr(pod, "why_pending", None)
    evicted = [{"node": r.node.name, "time_s": r.time_s, "cause": r.cause, "dimension": r.dimension,
                "detail": r.detail}
               for r in EvictionRecord.objects.filter(cluster=cluster, workload_name=pod.workload.name)
               .select_related("node").order_by("time_s")]
    if args.output in ("json", "yaml"):
        dump({**_answer(pod), "why_pending": why.record if why else None, "why_evicted": evicted}, args.output)
        return 0
    from kalena_web.console.formatting import eviction_condition
    from kalena_web.console.why import reason_text, reduction_text, rejection_lines

    w = pod.workload
    lines = [("Name", w.name), ("Cluster", cluster.name), ("State", "running" if pod.state == "bound" else pod.state),
             ("Node", w.node.name if w.node_id else (pod.ran_on or "<none>")), ("Owner", w.owner or "<none>"),
             ("Priority", str(w.priority)),
             ("Request", f"cpu {quantity(w.request[0] / 1000.0)} cores, ram {quantity(w.request[1] / GIB)} GiB"),
             ("Limit", f"cpu {quantity(w.limit[0] / 1000.0)} cores, ram {quantity(w.limit[1] / GIB)} GiB"),
             ("Submitted", _utc(pod.submitted_s)), ("Bound", _utc(pod.bound_s)), ("Requeues", str(pod.requeues))]
    if pod.outcome:
        lines.append(("Outcome", pod.outcome + (f" ({pod.reason})" if pod.reason else "")))
    width = max(len(k) for k, _ in lines) + 2
    for key, value in lines:
        print(f"{key + ':':<{width}}{value}")
    if why and pod.state == "pending":
        record = why.record
        print(f"Why pending ({_utc(why.time_s)}):")
        print(f"  binding constraint: {reason_text(record.get('binding'))} ({record.get('nodes_total', 0)} nodes)")
        for reason, n in (record.get("excluded") or {}).items():
            print(f"  {n} node{'s' if n != 1 else ''}: {reason_text(reason)}")
        if (text := reduction_text(record)):
            print(f"  {text}")
        for line in rejection_lines(record):
            print(f"  - {line}")
    if evicted:
        print("Evictions:")
        for r in evicted:
            print(f"  {_utc(r['time_s'])} from {r['node']}: {eviction_condition(r['cause'], r['dimension'])}")
    return 0


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
    if remote.server(args):
        limit = _block_arg(args.limit, "limit")
        body = {"name": args.name, "owner": args.owner, "request": _block_arg(args.request, "request"),
                "priority": args.priority, "labels": labels, "constraints": constraints, "image": args.image,
                "command": command, "gang": args.gang, **({"limit": limit} if limit is not None else {}),
                **({"min_member": args.min_member} if args.min_member is not None else {})}
        return remote.batch_submit(args, body)
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
    _print(_pod(cluster, queued.pod.workload.name), args.output)
    return 0


def handle_complete(args: argparse.Namespace) -> int:
    if remote.server(args):
        return remote.batch_complete(args)
    django_setup()
    from django.conf import settings

    from kalena_web.scheduling import services

    cluster = _cluster(args.cluster)
    pod = _pod(cluster, args.name)
    services.batch_complete(pod=pod, orchestrator_kind=settings.KALENA_ORCHESTRATOR, now_s=time.time())
    _print(_pod(cluster, args.name), args.output)
    return 0


def handle_delete(args: argparse.Namespace) -> int:
    if remote.server(args):
        return remote.batch_delete(args)
    django_setup()
    from kalena_web.control.orchestrators import orchestrator_for
    from kalena_web.scheduling import services

    cluster = _cluster(args.cluster)
    pod = _pod(cluster, args.name)
    services.batch_delete(pod=pod, orchestrator=lambda: orchestrator_for(cluster), now_s=time.time(),
                          by="from the command line")
    _print(_pod(cluster, args.name), args.output)
    return 0
