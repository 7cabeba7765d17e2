"""The lab's invariants, checked from what the orchestrator, the engines and Kalena's database
hold now (``kalena lab check``, docs/lab.md "Invariants"): no batch pod lost, none bound twice,
no production pod evicted.

* **Batch pods** are every pod Kalena accepted: each row of its ``scheduling_batchpod`` table for
  the lab's cluster and, in Kubernetes mode, every pod object of the API server that is batch
  (``schedulerName: kalena`` or the label ``kalena.naughtian.io/tier: batch``).
* **Lost**: a batch pod that is neither running, pending, completed nor failed with a record. Kubernetes mode: the
  pod object's phase says which (``Failed`` is a record: Kubernetes keeps the pod's status);
  without an object, Kalena's row must be terminal (``completed``, ``refused``, ``deleted``) —
  a row still ``pending`` or ``bound`` whose object is gone is lost. Docker and Swarm mode: the
  pod's container on the node's engine (running; exited 0 = completed; exited non-zero = failed,
  its exit code the record) or Kalena's row (pending; terminal); a row ``bound`` more than
  ``settle_s`` ago with no container anywhere is lost.
* **Double-bound**: one pod running on two nodes, or two running containers for one pod
  container (the engines' containers, by the pod uid label the kubelet double sets or Kalena's
  workload label in Docker mode), or running on another node than the one it is bound to.
* **Production evictions**: Kalena's eviction records (``archive_evictionrecord``) and the
  agents' ``evict`` actions (``telemetry_mitigationevent``) of any tier but batch, and in
  Kubernetes mode production pods (not batch) the API server holds as ``Evicted`` or with a
  ``DisruptionTarget`` condition.

The database is read with plain SQL (SQLite file or PostgreSQL URL from ``lab.json``), so a
caller with its own Django set-up can check a lab.
"""

from __future__ import annotations

import json
import time
import urllib.request
from collections import defaultdict
from pathlib import Path
from typing import Any

from agents.lab import nodes as machinery
from agents.lab.state import alive

TERMINAL = ("completed", "refused", "deleted")
UID_LABEL = "io.kubernetes.pod.uid"
POD_LABEL = "io.kubernetes.pod.name"
NS_LABEL = "io.kubernetes.pod.namespace"
CONTAINER_LABEL = "io.kubernetes.container.name"
WORKLOAD_LABEL = "kalena.naughtian.io/workload"
TIER_LABEL = "kalena.naughtian.io/tier"


def database_url(state: dict[str, Any]) -> str:
    """The lab control plane's database: ``postgres://…`` or ``sqlite:///path``."""
    db = (state.get("database") or {}).get("url")
    if db:
        return db
    return "sqlite:///" + str((state.get("console") or {}).get("env", {}).get("KALENA_DB_PATH")
                              or Path(state["logs"]).parent / "console" / "kalena.sqlite3")


def query(url: str, sql: str, params: tuple = ()) -> list[dict[str, Any]]:
    """Rows of ``sql`` (``%s`` placeholders) on the database ``url`` names, as dicts."""
    if url.startswith("sqlite:///"):
        import sqlite3

        with sqlite3.connect(url[len("sqlite:///"):], timeout=30) as conn:
            conn.row_factory = sqlite3.Row
            return [dict(r) for r in conn.execute(sql.replace("%s", "?"), params).fetchall()]
    import psycopg
    from psycopg.rows import dict_row

    with psycopg.connect(url, connect_timeout=10, row_factory=dict_row) as conn:
        return list(conn.execute(sql, params).fetchall())


def _api_pods(state: dict[str, Any]) -> list[dict[str, Any]]:
    with urllib.request.urlopen(state["apiserver"]["url"] + "/api/v1/pods", timeout=30) as r:  # noqa: S310 - loopback
        return json.loads(r.read()).get("items") or []


def _containers(state: dict[str, Any]) -> list[dict[str, Any]]:
    """Every container of every node's engine: ``node``, ``id``, ``state`` (running, exited…),
    ``exit_code``, ``labels``. An engine that does not answer adds ``{"node", "error"}``."""
    out = []
    for record in state["nodes"]:
        if not alive(record.get("engine")):
            out.append({"node": record["name"], "error": "engine not running"})
            continue
        try:
            client = machinery.engine_client(f"unix://{record['socket']}", timeout_s=20)
            try:
                for c in client.api.containers(all=True):
                    status = str(c.get("Status") or "")
                    code = None
                    if status.startswith("Exited (") and ")" in status:
                        code = int(status[len("Exited ("):status.index(")")])
                    out.append({"node": record["name"], "id": c["Id"], "state": c.get("State"), "exit_code": code,
                                "labels": c.get("Labels") or {}})
            finally:
                client.close()
        except Exception as exc:  # noqa: BLE001 - reported: the check cannot see that node
            out.append({"node": record["name"], "error": f"engine does not answer ({exc})"[:200]})
    return out


def _db_batch(url: str, cluster: str) -> list[dict[str, Any]]:
    return query(url, "SELECT b.state, b.outcome, b.reason, b.uid, b.bound_s, b.ran_on, b.gone, w.name, w.namespace, "
                      "n.name AS node FROM scheduling_batchpod b JOIN inventory_workload w ON w.id = b.workload_id "
                      "JOIN inventory_cluster c ON c.id = b.cluster_id LEFT JOIN inventory_node n ON n.id = w.node_id "
                      "WHERE c.name = %s", (cluster,))


def _db_production_evictions(url: str, cluster: str) -> list[dict[str, Any]]:
    records = query(url, "SELECT e.workload_name, e.time_s, e.cause, e.tier, n.name AS node FROM archive_evictionrecord e "
                         "JOIN inventory_cluster c ON c.id = e.cluster_id JOIN inventory_node n ON n.id = e.node_id "
                         "WHERE c.name = %s AND e.tier <> 'batch'", (cluster,))
    actions = query(url, "SELECT m.workload_name, m.ts AS time_s, m.reason AS cause, m.tier, n.name AS node "
                         "FROM telemetry_mitigationevent m JOIN inventory_node n ON n.id = m.node_id "
                         "JOIN inventory_cluster c ON c.id = n.cluster_id WHERE c.name = %s AND m.action = 'evict' "
                         "AND m.tier <> 'batch' AND m.tier <> ''", (cluster,))
    return [{"source": "eviction record", **r} for r in records] + [{"source": "agent action", **r} for r in actions]


def _is_batch_pod(pod: dict[str, Any]) -> bool:
    labels = (pod.get("metadata") or {}).get("labels") or {}
    return (pod.get("spec") or {}).get("schedulerName") == "kalena" or labels.get(TIER_LABEL) == "batch"


def _cluster_name(state: dict[str, Any]) -> str:
    return state.get("cluster") or state["name"]


def check(state: dict[str, Any], *, settle_s: float = 30.0, now_s: float | None = None) -> dict[str, Any]:
    """The invariants (module doc) of the lab recorded in ``state`` (``lab.json``'s record).

    Returns ``{"checked_at", "orchestrator", "batch_pods", "counts": {"lost", "double_bound",
    "production_evictions"}, "lost": [...], "double_bound": [...], "production_evictions": [...],
    "unseen": [...]}`` — each list item names the pod (and node, state, why); ``unseen`` lists
    engines that did not answer (a node the check could not see: the counts cannot be trusted
    then, and :func:`violations` counts it).
    """
    now_s = time.time() if now_s is None else now_s
    url = database_url(state)
    cluster = _cluster_name(state)
    if state.get("orchestrator") == "kubernetes":
        cluster = _kubernetes_cluster(state) or cluster
    containers = _containers(state)
    unseen = [c for c in containers if "error" in c]
    containers = [c for c in containers if "error" not in c]
    rows = _db_batch(url, cluster)
    evictions = _db_production_evictions(url, cluster)
    if state.get("orchestrator") == "kubernetes":
        pods = _api_pods(state)
        lost, double, batch_count = _kubernetes_pods(pods, rows, containers)
        for pod in pods:
            if _is_batch_pod(pod):
                continue
            status = pod.get("status") or {}
            disrupted = [c for c in status.get("conditions") or [] if c.get("type") == "DisruptionTarget"
                         and c.get("status") == "True"]
            if status.get("reason") == "Evicted" or disrupted:
                meta = pod["metadata"]
                evictions.append({"source": "API server", "workload_name": f"{meta.get('namespace')}/{meta['name']}",
                                  "node": (pod.get("spec") or {}).get("nodeName"),
                                  "cause": status.get("reason") or (disrupted[0].get("reason") if disrupted else ""),
                                  "tier": "production", "time_s": None})
    else:
        lost, double, batch_count = _docker_pods(rows, containers, settle_s=settle_s, now_s=now_s)
    return {"checked_at": now_s, "orchestrator": state.get("orchestrator", "docker"), "cluster": cluster,
            "batch_pods": batch_count,
            "counts": {"lost": len(lost), "double_bound": len(double), "production_evictions": len(evictions)},
            "lost": lost, "double_bound": double, "production_evictions": evictions, "unseen": unseen}


def violations(report: dict[str, Any]) -> int:
    """How many invariant violations ``report`` holds (an engine the check could not see counts one)."""
    return sum(report["counts"].values()) + len(report.get("unseen") or [])


def _kubernetes_cluster(state: dict[str, Any]) -> str | None:
    for record in state.get("processes", []):
        value = (record.get("env") or {}).get("KALENA_AGENT_TOKENREVIEW_CLUSTER")
        if value:
            return value
    return None


def _running_by_pod(containers: list[dict[str, Any]], key_label: str) -> dict[str, list[dict[str, Any]]]:
    out: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for c in containers:
        key = c["labels"].get(key_label)
        if key and c["state"] == "running":
            out[key].append(c)
    return out


def _double(key: str, running: list[dict[str, Any]], bound_node: str | None, name: str) -> dict[str, Any] | None:
    nodes = sorted({c["node"] for c in running})
    per_container: dict[str, int] = defaultdict(int)
    for c in running:
        per_container[c["labels"].get(CONTAINER_LABEL, "")] += 1
    twice = sorted(k for k, n in per_container.items() if n > 1)
    elsewhere = bool(bound_node) and any(n != bound_node for n in nodes)
    if len(nodes) > 1 or twice or elsewhere:
        why = (f"running on {len(nodes)} nodes" if len(nodes) > 1 else
               f"two running containers for container {twice[0]!r}" if twice else
               f"bound to {bound_node} but running on {', '.join(nodes)}")
        return {"pod": name, "key": key, "nodes": nodes, "bound_to": bound_node, "containers": [c["id"][:12] for c in running],
                "why": why}
    return None


def _kubernetes_pods(pods: list[dict[str, Any]], rows: list[dict[str, Any]],
                     containers: list[dict[str, Any]]) -> tuple[list, list, int]:
    by_uid = {p["metadata"]["uid"]: p for p in pods if p["metadata"].get("uid")}
    batch = {uid: p for uid, p in by_uid.items() if _is_batch_pod(p)}
    row_by_uid = {r["uid"]: r for r in rows if r.get("uid")}
    running = _running_by_pod(containers, UID_LABEL)
    lost, double = [], []
    for uid in sorted(set(batch) | set(row_by_uid)):
        pod, row = by_uid.get(uid), row_by_uid.get(uid)
        name = (f"{pod['metadata'].get('namespace')}/{pod['metadata']['name']}" if pod else
                f"{row['namespace']}/{row['name']}" if row.get("namespace") else row["name"])  # type: ignore[union-attr]
        if pod is not None:
            phase = (pod.get("status") or {}).get("phase") or "Pending"
            if phase not in ("Pending", "Running", "Succeeded", "Failed"):
                lost.append({"pod": name, "uid": uid, "why": f"phase {phase!r}"})
        elif row["state"] not in TERMINAL:  # type: ignore[index]
            lost.append({"pod": name, "uid": uid, "node": row.get("node"),  # type: ignore[union-attr]
                         "why": f"Kalena holds it {row['state']} but the API server has no such pod"})  # type: ignore[index]
        bound_node = (pod.get("spec") or {}).get("nodeName") if pod else None
        found = _double(uid, running.get(uid, []), bound_node, name)
        if found:
            double.append(found)
    return lost, double, len(set(batch) | set(row_by_uid))


def _docker_pods(rows: list[dict[str, Any]], containers: list[dict[str, Any]], *, settle_s: float,
                 now_s: float) -> tuple[list, list, int]:
    by_workload: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for c in containers:
        key = c["labels"].get(WORKLOAD_LABEL)
        if key:
            by_workload[key].append(c)
    running = _running_by_pod(containers, WORKLOAD_LABEL)
    lost, double = [], []
    for row in rows:
        # Kalena's workload label: the name as submitted (``namespace/pod``)
        key = row["name"] if "/" in row["name"] or not row.get("namespace") else f"{row['namespace']}/{row['name']}"
        names = {key, row["name"]}
        mine = [c for n in names for c in by_workload.get(n, [])]
        live = [c for n in names for c in running.get(n, [])]
        if row["state"] == "bound" and not mine and (row.get("bound_s") or 0) < now_s - settle_s:
            lost.append({"pod": key, "node": row.get("node"),
                         "why": f"bound {now_s - (row.get('bound_s') or now_s):.0f} s ago and no container on any "
                                "engine"})
        found = _double(key, live, row.get("node") if row["state"] == "bound" else None, key)
        if found:
            double.append(found)
    return lost, double, len(rows)


def format_check(report: dict[str, Any]) -> str:
    """``kalena lab check``'s text: the three counts, then each violation on its own line."""
    c = report["counts"]
    lines = [f"kalena lab check: {report['batch_pods']} batch pod(s) — lost {c['lost']}, double-bound "
             f"{c['double_bound']}, production evictions {c['production_evictions']}"]
    lines += [f"  lost: {v['pod']}: {v['why']}" for v in report["lost"]]
    lines += [f"  double-bound: {v['pod']}: {v['why']}" for v in report["double_bound"]]
    lines += [f"  production eviction: {v['workload_name']} on {v.get('node')} ({v['source']}: {v.get('cause')})"
              for v in report["production_evictions"]]
    lines += [f"  not seen: node {u['node']}: {u['error']}" for u in report.get("unseen") or []]
    return "\n".join(lines)
