"""The command line as a thin client of a console's REST API: ``kalena batch …`` and ``kalena get
nodes`` with ``--server URL`` (or ``KALENA_SERVER``) and an API token (``--token`` or
``KALENA_TOKEN``; ``kalena api-token create`` makes one).

Standard library only — no Django, numpy, pydantic or Celery — so a call costs the interpreter's
start, one or two HTTP requests and the console's answer (``kalena bench cli`` measures it),
instead of setting Django up against the database (seconds). The answers are the REST API's
(docs/rest-api.md) and print as the database path prints them: a table by default, ``-o wide``,
``-o json|yaml`` the REST answer.

Exit status as the database path: 0 done, 1 not found (HTTP 404), 2 refused (any other 4xx: the
console's ``detail``, which names the field; nothing changed), 3 the console could not be reached
or answered 5xx (the message names the URL).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from typing import Any

from kalena_engine.errors import KalenaError
from kalena_web.cli.output import age, dump, quantity, table

#: environment variables the thin client reads when its flags are not given
SERVER_ENV, TOKEN_ENV = "KALENA_SERVER", "KALENA_TOKEN"
TIMEOUT_S = 30.0


class RemoteError(KalenaError):
    """The console refused the call (4xx: exit 2; 404: exit 1) or could not be reached (exit 3);
    the message is the console's ``detail`` (it names the field) or names the URL."""

    def __init__(self, message: str, *, exit_code: int = 2) -> None:
        super().__init__(message)
        self.exit_code = exit_code


def add_flags(parser: argparse.ArgumentParser) -> None:
    """``--server URL`` and ``--token TOKEN`` (default ``$KALENA_SERVER``, ``$KALENA_TOKEN``)."""
    parser.add_argument("--server", default=None, metavar="URL",
                        help=f"a console's URL (default ${SERVER_ENV}): talk to its REST API instead of "
                             "opening the database (fast: no Django start-up)")
    parser.add_argument("--token", default=None, metavar="TOKEN",
                        help=f"API token for --server (default ${TOKEN_ENV}; `kalena api-token create`)")


def server(args: argparse.Namespace) -> str | None:
    """The console URL this call goes to, or ``None`` to use the database directly."""
    url = getattr(args, "server", None) or os.environ.get(SERVER_ENV, "")
    return url.rstrip("/") or None


class Client:
    """One console: ``request(method, path, body)`` → ``(status, decoded JSON or None, headers)``."""

    def __init__(self, url: str, token: str | None) -> None:
        parsed = urllib.parse.urlsplit(url)
        if parsed.scheme not in ("http", "https") or not parsed.netloc:
            raise RemoteError(f"--server: {url!r} is not an http(s) URL (e.g. http://127.0.0.1:8000)")
        if not token:
            raise RemoteError(f"--server {url} needs an API token: --token or ${TOKEN_ENV} "
                              "(the console's API tokens page makes one, or `kalena api-token create USER "
                              "--name NAME` run against that console's database)")
        self.url, self.token = url, token

    def request(self, method: str, path: str, body: dict | None = None,
                query: dict[str, str] | None = None) -> tuple[int, Any]:
        url = self.url + path + ("?" + urllib.parse.urlencode(query) if query else "")
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(url, data=data, method=method, headers={
            "Authorization": f"Bearer {self.token}", "Accept": "application/json",
            **({"Content-Type": "application/json"} if data is not None else {})})
        try:
            with urllib.request.urlopen(req, timeout=TIMEOUT_S) as resp:  # noqa: S310 - http(s) checked above
                status, raw = resp.status, resp.read()
        except urllib.error.HTTPError as exc:
            status, raw = exc.code, exc.read()
        except (urllib.error.URLError, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            raise RemoteError(f"cannot reach the console at {self.url} ({reason})", exit_code=3) from None
        answer = json.loads(raw) if raw else None
        if status >= 500:
            detail = answer.get("detail") if isinstance(answer, dict) else ""
            raise RemoteError(f"the console at {self.url} answered {status} for {method} {path}: {detail}",
                              exit_code=3)
        if status >= 400:
            detail = answer.get("detail", "") if isinstance(answer, dict) else str(answer)
            raise RemoteError(detail or f"{method} {path}: HTTP {status}", exit_code=1 if status == 404 else 2)
        return status, answer


def _client(args: argparse.Namespace) -> Client:
    return Client(server(args) or "", getattr(args, "token", None) or os.environ.get(TOKEN_ENV, ""))


def _quote(name: str) -> str:
    return "/".join(urllib.parse.quote(part, safe="") for part in name.split("/"))


def _find(client: Client, cluster: str, name: str) -> dict:
    """The pod ``name`` in any state (the list filtered by name; exact match)."""
    _, pods = client.request("GET", f"/api/clusters/{_quote(cluster)}/batch",
                             query={"state": "all", "q": name, "page_size": "1000"})
    for pod in pods:
        if pod["name"] == name:
            return pod
    raise RemoteError(f"no batch pod {name!r} in {cluster!r}", exit_code=1)


def _columns(wide: bool, now_s: float) -> list:
    cols = [("NAME", lambda p: p["name"]), ("STATE", lambda p: "running" if p["state"] == "bound" else p["state"]),
            ("NODE", lambda p: p.get("node") or ""), ("PRIORITY", lambda p: p["priority"]),
            ("CPU", lambda p: quantity(p["request"].get("cpu", 0))),
            ("RAM", lambda p: quantity(p["request"].get("ram", 0), "Gi")),
            ("AGE", lambda p: age(now_s - p["submitted_s"]) if p.get("submitted_s") else "")]
    if wide:
        from kalena_web.console.why import reason_text

        cols += [("OWNER", lambda p: p.get("owner")), ("REQUEUES", lambda p: p.get("requeues")),
                 ("WHY PENDING", lambda p: reason_text(p["binding"])
                  if p["state"] == "pending" and p.get("binding") else "")]
    return cols


def _print_pod(pod: dict, fmt: str) -> None:
    if fmt in ("json", "yaml"):
        dump(pod, fmt)
    else:
        table([pod], _columns(fmt == "wide", time.time()))


def batch_get(args: argparse.Namespace) -> int:
    client = _client(args)
    state = args.state or args.default_state
    if args.name:
        pods = [_find(client, args.cluster, args.name)]
    else:
        query = {"state": state or "all", "page_size": "1000"}
        _, pods = client.request("GET", f"/api/clusters/{_quote(args.cluster)}/batch", query=query)
        if not state:
            pods = [p for p in pods if p["state"] != "deleted"]
    if args.output in ("json", "yaml"):
        dump(pods[0] if args.name else pods, args.output)
        return 0
    if not pods:
        print(f"No {state + ' ' if state not in ('', 'all') else ''}batch pods in {args.cluster}.", file=sys.stderr)
        return 0
    table(pods, _columns(args.output == "wide", time.time()))
    return 0


def batch_describe(args: argparse.Namespace) -> int:
    client = _client(args)
    pod = _find(client, args.cluster, args.name)
    why = None
    if pod["state"] == "pending":
        try:
            _, why = client.request("GET", f"/api/clusters/{_quote(args.cluster)}/batch/{_quote(args.name)}/why-pending")
        except RemoteError as exc:
            if exc.exit_code != 1:  # 404: not through a scheduling pass yet
                raise
    if args.output in ("json", "yaml"):
        dump({**pod, "why_pending": why}, args.output)
        return 0
    from kalena_web.console.why import reason_text, reduction_text, rejection_lines

    def when(s: float | None) -> str:
        return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(s)) if s is not None else "<none>"

    req, lim = pod["request"], pod["limit"]
    lines = [("Name", pod["name"]), ("Cluster", args.cluster),
             ("State", "running" if pod["state"] == "bound" else pod["state"]), ("Node", pod.get("node") or "<none>"),
             ("Owner", pod.get("owner") or "<none>"), ("Priority", str(pod["priority"])),
             ("Request", f"cpu {quantity(req.get('cpu', 0))} cores, ram {quantity(req.get('ram', 0))} GiB"),
             ("Limit", f"cpu {quantity(lim.get('cpu', 0))} cores, ram {quantity(lim.get('ram', 0))} GiB"),
             ("Submitted", when(pod.get("submitted_s"))), ("Bound", when(pod.get("bound_s"))),
             ("Requeues", str(pod.get("requeues", 0)))]
    width = max(len(k) for k, _ in lines) + 2
    for key, value in lines:
        print(f"{key + ':':<{width}}{value}")
    if why:
        print(f"Why pending ({when(why.get('time_s'))}):")
        print(f"  binding constraint: {reason_text(why.get('binding'))} ({why.get('nodes_total', 0)} nodes)")
        for reason, n in (why.get("excluded") or {}).items():
            print(f"  {n} node{'s' if n != 1 else ''}: {reason_text(reason)}")
        if (text := reduction_text(why)):
            print(f"  {text}")
        for line in rejection_lines(why):
            print(f"  - {line}")
    return 0


def batch_submit(args: argparse.Namespace, body: dict) -> int:
    client = _client(args)
    status, pod = client.request("POST", f"/api/clusters/{_quote(args.cluster)}/batch", body=body)
    if status == 200:
        print(f"{args.name} was already submitted with this spec; nothing changed", file=sys.stderr)
    _print_pod(pod, args.output)
    return 0


def batch_complete(args: argparse.Namespace) -> int:
    client = _client(args)
    _, pod = client.request("POST", f"/api/clusters/{_quote(args.cluster)}/batch/{_quote(args.name)}/complete")
    _print_pod(pod, args.output)
    return 0


def batch_delete(args: argparse.Namespace) -> int:
    client = _client(args)
    client.request("DELETE", f"/api/clusters/{_quote(args.cluster)}/batch/{_quote(args.name)}")
    _print_pod(_find(client, args.cluster, args.name), args.output)
    return 0


def get_nodes(args: argparse.Namespace) -> int:
    """``kalena get nodes`` from ``GET /api/clusters/{c}/nodes`` (IR units: cores, GiB)."""
    client = _client(args)
    _, nodes = client.request("GET", f"/api/clusters/{_quote(args.cluster)}/nodes", query={"page_size": "1000"})
    now = time.time()
    rows = [{"name": n["name"], "ready": n.get("ready"), "schedulable": n.get("schedulable"),
             "stale": n["telemetry_stale"], "last_sample_s": n["last_sample_s"],
             **{k: {"cpu": float(n[k].get("cpu", 0)), "ram": float(n[k].get("ram", 0))}
                for k in ("capacity", "slack", "headroom", "requests", "reservations", "usage")},
             "batch_pods": n["batch_pods"],
             "age_s": None if n["last_sample_s"] is None else now - n["last_sample_s"]} for n in nodes]
    from kalena_web.cli.get import print_nodes

    print_nodes(rows, args.output)
    return 0
