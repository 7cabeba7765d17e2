"""The lab's production binder: what kube-scheduler does for a slice's production in a real
cluster, reduced to what the blueprint already decided (docs/lab.md "The slice in the lab").

The lab has no kube-scheduler, so production pods the slice's controllers make would stay
Pending. The binder places each one on the lab node the blueprint chose, through the API
server's Binding (``POST pods/<name>/binding``, as kube-scheduler binds):

* a StatefulSet pod ``<name>-<i>`` → the node of the declaration's slice pod ``i``
  (``placement.json`` ``pods``, in the slice's order: ordinal ``i`` is slice pod ``i``);
* any other production pod (a Deployment's replica, a bare pod) → among the nodes its
  ``nodeSelector`` / required node affinity allows, the one where the blueprint holds the most
  pods of its workload not yet bound there (``placement.json`` ``workloads[].nodes``);
* a cordoned node (``kubectl cordon`` / ``drain``) gets no new pod: the pod stays Pending;
* a pod the blueprint gives no node, batch (``schedulerName: kalena``: Kalena places it) and any
  pod outside the slice (no ``lab.kalena.naughtian.io/slice`` label naming the lab) is left alone.

``python -m agents.lab.binder --api-server URL --placement FILE --lab NAME [--every-s 1]``
lists the pods every ``--every-s`` seconds and binds what is pending; it prints one line per
binding.
"""

from __future__ import annotations

import argparse
import json
import re
import signal
import sys
import time
import urllib.error
import urllib.request
from collections import Counter
from pathlib import Path
from typing import Any

SLICE_LABEL = "lab.kalena.naughtian.io/slice"
HOSTNAME = "kubernetes.io/hostname"


def allowed_nodes(pod: dict[str, Any]) -> set[str] | None:
    """The hostnames the pod's ``nodeSelector`` and required node affinity allow (None: any)."""
    spec = pod.get("spec") or {}
    allowed: set[str] | None = None
    host = (spec.get("nodeSelector") or {}).get(HOSTNAME)
    if host:
        allowed = {host}
    terms = ((((spec.get("affinity") or {}).get("nodeAffinity") or {})
              .get("requiredDuringSchedulingIgnoredDuringExecution") or {}).get("nodeSelectorTerms") or [])
    values: set[str] = set()
    for term in terms:
        for expr in term.get("matchExpressions") or []:
            if expr.get("key") == HOSTNAME and expr.get("operator") == "In":
                values |= set(expr.get("values") or [])
    if values:
        allowed = values if allowed is None else allowed & values
    return allowed


def choose_nodes(pods: list[dict[str, Any]], placement: dict[str, Any], lab: str,
                 unschedulable: set[str] | frozenset[str] = frozenset()) -> list[tuple[dict, str]]:
    """The bindings to make: ``[(pod, node)]`` for every pending production pod of the slice.

    ``pods`` is the API server's pod list (every namespace); ``placement`` the slice's
    ``placement.json``; ``unschedulable`` the cordoned nodes (``spec.unschedulable``), which get no
    new pod, as kube-scheduler's NodeUnschedulable filter (the pod stays Pending). Counts already
    bound are taken into account, so a pod replaced by its controller goes back where the
    blueprint holds a place for it.
    """
    want: dict[tuple[str, str], Counter] = {}
    kinds: dict[tuple[str, str], str] = {}
    for w in placement.get("workloads") or []:
        want[(w["namespace"], w["name"])] = Counter(w["nodes"])
        kinds[(w["namespace"], w["name"])] = w["kind"]
    ordinals: dict[tuple[str, str], list[str]] = {}
    for pod_id, p in sorted((placement.get("pods") or {}).items()):
        ns, name = pod_id.split("/", 1)
        decl = re.sub(r"-\d+$", "", name)
        ordinals.setdefault((ns, decl), []).append(p["node"])
    bound: dict[tuple[str, str], Counter] = {}
    pending = []
    for pod in pods:
        meta, spec = pod.get("metadata") or {}, pod.get("spec") or {}
        labels = meta.get("labels") or {}
        if labels.get(SLICE_LABEL) != lab or spec.get("schedulerName") == "kalena":
            continue
        key = (meta.get("namespace", ""), labels.get("app", ""))
        if key not in want:
            continue
        if meta.get("deletionTimestamp") or (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
            continue
        if spec.get("nodeName"):
            bound.setdefault(key, Counter())[spec["nodeName"]] += 1
        else:
            pending.append((key, pod))
    out = []
    for key, pod in sorted(pending, key=lambda kp: kp[1]["metadata"]["name"]):
        allowed = allowed_nodes(pod)
        node = None
        if kinds[key] == "StatefulSet":
            m = re.search(r"-(\d+)$", pod["metadata"]["name"])
            nodes = ordinals.get(key) or []
            if m and int(m.group(1)) < len(nodes):
                node = nodes[int(m.group(1))]
        if node is None:
            have = bound.setdefault(key, Counter())
            room = [(want[key][n] - have[n], n) for n in sorted(want[key]) if allowed is None or n in allowed]
            room = [r for r in room if r[0] > 0 and r[1] not in unschedulable]
            node = max(room, key=lambda r: (r[0], [-ord(c) for c in r[1]]))[1] if room else None
        if node is None or node in unschedulable or (allowed is not None and node not in allowed):
            continue
        bound.setdefault(key, Counter())[node] += 1
        out.append((pod, node))
    return out


def _request(url: str, method: str = "GET", body: Any = None, token: str = "") -> Any:
    headers = {"Content-Type": "application/json"}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, method=method, headers=headers)
    with urllib.request.urlopen(req, timeout=10) as response:  # noqa: S310 - the lab's own API server
        return json.loads(response.read() or b"{}")


def bind_once(api: str, placement: dict[str, Any], lab: str, say=print) -> int:
    """List the pods, bind every pending production pod of the slice; returns how many were bound."""
    pods = _request(f"{api}/api/v1/pods").get("items") or []
    cordoned = {(n.get("metadata") or {}).get("name") for n in _request(f"{api}/api/v1/nodes").get("items") or []
                if (n.get("spec") or {}).get("unschedulable")}
    done = 0
    for pod, node in choose_nodes(pods, placement, lab, unschedulable=cordoned):
        meta = pod["metadata"]
        body = {"apiVersion": "v1", "kind": "Binding", "metadata": {"name": meta["name"], "namespace": meta["namespace"]},
                "target": {"apiVersion": "v1", "kind": "Node", "name": node}}
        try:
            _request(f"{api}/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}/binding", "POST", body)
        except urllib.error.HTTPError as exc:  # gone or bound meanwhile: the next round sees it
            say(f"binder: {meta['namespace']}/{meta['name']} → {node}: HTTP {exc.code}")
            continue
        done += 1
        say(f"binder: bound {meta['namespace']}/{meta['name']} to {node} (the blueprint's node)")
    return done


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m agents.lab.binder", description=__doc__.split("\n\n")[0])
    parser.add_argument("--api-server", required=True)
    parser.add_argument("--placement", type=Path, required=True, help="the slice's placement.json")
    parser.add_argument("--lab", required=True, help="the lab's name (the slice label's value)")
    parser.add_argument("--every-s", type=float, default=1.0)
    args = parser.parse_args(argv)
    placement = json.loads(args.placement.read_text())
    stopping = []
    signal.signal(signal.SIGTERM, lambda *_: stopping.append(1))
    while not stopping:
        try:
            bind_once(args.api_server, placement, args.lab, say=lambda line: print(line, flush=True))
        except (urllib.error.URLError, OSError) as exc:
            print(f"binder: API server: {exc}", flush=True)
        time.sleep(args.every_s)
    return 0


if __name__ == "__main__":
    sys.exit(main())
