"""``kalena lab up --orchestrator swarm``: the lab's private engines joined into one multi-node
Swarm (TESTBED "Multi-node Swarm on one machine").

The first ``managers`` nodes are managers (the first one initialises the swarm), the others
workers; every node advertises and listens on its own loopback address (``<address>:2377``), so
managers and workers are told apart by address exactly as on separate machines. Every node
reports the machine's hostname here, so a node is named by its Swarm node label
``kalena.naughtian.io/node`` (set by the first manager to the lab node's name, the name the
node's agent runs under), never by hostname. ``down`` removes Kalena's services and makes every
engine leave (workers first), before the engines are stopped.

This code plays the cluster's machines, not Kalena: Kalena's Swarm adapter reads the nodes the
way it reads any Swarm's (:mod:`agents.orchestrators.docker.client`).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from agents.lab import nodes as machinery
from agents.lab.errors import LabError

SWARM_PORT = 2377
NODE_LABEL = "kalena.naughtian.io/node"


def swarm_form(records: list[dict[str, Any]], *, managers: int = 1, links: Path | None = None,
               say: Callable[[str], None] = print) -> dict[str, Any]:
    """Init the swarm on ``records[0]``'s engine, join the others (the first ``managers`` as
    managers), label every node with its lab name; writes ``record["swarm"]`` (node id, role)
    into each record and returns the lab's swarm record (``manager``, ``managers``, ``port``,
    ``node_links``).

    ``links``: a directory made to hold one symlink per Swarm node ID → that node's directory
    (its ``docker.sock``): a stack's bind mount ``<links>/{{.Node.ID}}/docker.sock`` (a Swarm
    service template) gives each node's task its own engine's socket, the lab's per-node
    substitution for ``KALENA_DOCKER_SOCK`` (:func:`agents.lab.status.stack_substitutions`).

    Raises:
        LabError: an engine refused to init or join (its message and the node name).
    """
    if not 1 <= managers <= len(records):
        raise LabError(f"{managers} manager(s) for {len(records)} node(s)", source="kalena lab up",
                       field="--managers", accepted=f"1 … {len(records)}")
    first = records[0]
    manager = machinery.engine_client(f"unix://{first['socket']}", timeout_s=60)
    try:
        try:
            manager.swarm.init(advertise_addr=first["address"], listen_addr=f"{first['address']}:{SWARM_PORT}")
        except Exception as exc:  # noqa: BLE001 - docker's APIError: named for the user
            raise LabError(f"swarm init refused: {_explain(exc)}", source=f"node {first['name']}", field="swarm") from None
        manager.swarm.reload()
        tokens = manager.swarm.attrs["JoinTokens"]
        first["swarm"] = {"node_id": manager.info()["Swarm"]["NodeID"], "role": "manager"}
        for i, record in enumerate(records[1:], start=1):
            role = "manager" if i < managers else "worker"
            client = machinery.engine_client(f"unix://{record['socket']}", timeout_s=60)
            try:
                client.swarm.join(remote_addrs=[f"{first['address']}:{SWARM_PORT}"],
                                  join_token=tokens["Manager" if role == "manager" else "Worker"],
                                  advertise_addr=record["address"], listen_addr=f"{record['address']}:{SWARM_PORT}")
                record["swarm"] = {"node_id": client.info()["Swarm"]["NodeID"], "role": role}
            except Exception as exc:  # noqa: BLE001 - named for the user
                raise LabError(f"swarm join refused: {_explain(exc)}", source=f"node {record['name']}",
                               field="swarm") from None
            finally:
                client.close()
        for record in records:
            node = manager.nodes.get(record["swarm"]["node_id"])
            spec = dict(node.attrs["Spec"])
            spec["Labels"] = {**(spec.get("Labels") or {}), NODE_LABEL: record["name"]}
            node.update(spec)
            say(f"kalena lab: node {record['name']} in the swarm as {record['swarm']['role']} "
                f"{record['swarm']['node_id'][:12]} ({record['address']}:{SWARM_PORT})")
    finally:
        manager.close()
    if links is not None:
        links.mkdir(parents=True, exist_ok=True)
        for record in records:
            link = links / record["swarm"]["node_id"]
            link.unlink(missing_ok=True)
            link.symlink_to(record["directory"], target_is_directory=True)
    return {"manager": first["name"], "managers": [r["name"] for r in records[:managers]], "port": SWARM_PORT,
            "node_links": str(links) if links is not None else None}


def _explain(exc: Exception) -> str:
    return str(getattr(exc, "explanation", None) or exc)


def swarm_leave(records: list[dict[str, Any]], *, say: Callable[[str], None] = print) -> None:
    """Remove Kalena's services (through a manager that answers), then make every engine that
    still answers leave (workers first, managers last; ``force``). An engine that does not
    answer is skipped: it is stopped with the lab and its swarm state goes with its data root."""
    ordered = sorted(records, key=lambda r: (r.get("swarm") or {}).get("role") == "manager")
    for record in reversed(ordered):  # managers first: one that answers removes the services
        if (record.get("swarm") or {}).get("role") != "manager":
            continue
        try:
            client = machinery.engine_client(f"unix://{record['socket']}", timeout_s=10)
            services = client.services.list()
            for service in services:
                service.remove()
            client.close()
            if services:
                say(f"kalena lab: {len(services)} swarm service(s) removed")
            break
        except Exception:  # noqa: BLE001 - try the next manager
            continue
    for record in ordered:
        try:
            client = machinery.engine_client(f"unix://{record['socket']}", timeout_s=20)
            client.swarm.leave(force=True)
            client.close()
        except Exception as exc:  # noqa: BLE001 - not in a swarm any more, or not answering
            if "not part of a swarm" not in _explain(exc):
                say(f"kalena lab: node {record['name']}: could not leave the swarm ({_explain(exc)})")


def swarm_nodes(records: list[dict[str, Any]], timeout_s: float = 5.0) -> dict[str, dict[str, Any]]:
    """Lab node name → ``{"id", "role", "state", "availability", "leader", "address"}`` as the
    first manager that answers reports it (empty when none answers)."""
    for record in records:
        if (record.get("swarm") or {}).get("role") != "manager":
            continue
        try:
            client = machinery.engine_client(f"unix://{record['socket']}", timeout_s=timeout_s)
            listed = [n.attrs for n in client.nodes.list()]
            client.close()
        except Exception:  # noqa: BLE001 - the next manager
            continue
        out = {}
        for n in listed:
            name = (n.get("Spec", {}).get("Labels") or {}).get(NODE_LABEL) or n["ID"]
            out[name] = {"id": n["ID"], "role": n["Spec"].get("Role", ""), "state": n["Status"].get("State", ""),
                         "availability": n["Spec"].get("Availability", ""),
                         "leader": bool((n.get("ManagerStatus") or {}).get("Leader")),
                         "address": n["Status"].get("Addr", "")}
        return out
    return {}
