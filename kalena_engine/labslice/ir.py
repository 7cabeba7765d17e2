"""The slice as Kuberina IR v1 documents (infrastructure, workloads, blueprint) the console
imports (``kalena cluster import --infra … --workloads … --blueprint …``) and a replay reads.

* Infrastructure: one node per lab node (its name, the blueprint node's zone, rack and labels,
  allocatable = the lab node's cpu and memory), the DaemonSets scaled to the lab.
* Workloads: ``namespaces: {ns: [declaration…]}`` with the slice's replica counts and scaled
  requests, the IR's nodeSelector and tolerations, affinity / anti-affinity as slice pod ids,
  topology spread.
* Blueprint: ``solution: {ns/pod: lab node}``, ``metadata.feasible: true`` and where it came from.

Quantities are written as IR strings in exact binary units (``"16m"`` cores, ``"10Mi"`` GiB),
so the readers give back exactly the lab's requests.
"""

from __future__ import annotations

from kalena_engine.labslice.production import ProductionSlice
from kalena_engine.kuberina.fields import API_VERSION


def slice_ir_documents(prod: ProductionSlice, *, source: str = "") -> tuple[dict, dict, dict]:
    """``(infrastructure, workloads, blueprint)`` documents (plain dicts, YAML-ready)."""
    nodes = [{"name": lab, "zone": prod.zones[lab], "rack": prod.racks[lab], "labels": dict(prod.node_labels[lab]),
              "taints": [{"key": t.key, **({"value": t.value} if t.value else {}), "effect": t.effect}
                         for t in prod.node_taints.get(lab, ())], "allocatable": {"cpu": f"{prod.shape.cpu_m}m", "ram": f"{prod.shape.memory_mib}Mi"}}
             for lab, _ in prod.node_map]
    daemonsets = [{"name": ds.name, "resources": {"cpu": f"{ds.cpu_m}m", "ram": f"{ds.memory_mib}Mi"},
                   **({"nodeSelector": dict(ds.node_selector)} if ds.node_selector else {}),
                   "tolerations": list(ds.tolerations)} for ds in prod.daemonsets]
    infra = {"apiVersion": API_VERSION, "kind": "Infrastructure", "nodes": nodes, "daemonsets": daemonsets}
    namespaces: dict[str, list[dict]] = {}
    for d in prod.declarations:
        decl: dict = {"name": d.name, "replicas": len(d.pods),
                      "requests": {"cpu": f"{d.cpu_m}m", "ram": f"{d.memory_mib}Mi"}}
        if d.node_selector:
            decl["nodeSelector"] = dict(d.node_selector)
        if d.tolerations:
            decl["tolerations"] = [{"key": t.key, "operator": t.operator, **({"value": t.value} if t.value else {}),
                                    **({"effect": t.effect} if t.effect else {})} for t in d.tolerations]
        if d.affinity:
            decl["affinity"] = list(d.affinity)
        if d.anti_affinity:
            decl["antiAffinity"] = list(d.anti_affinity)
        if d.topology_spread is not None:
            decl["topologySpread"] = {"maxSkew": d.topology_spread.max_skew,
                                      "topologyKey": d.topology_spread.topology_key}
        namespaces.setdefault(d.namespace, []).append(decl)
    workloads = {"apiVersion": API_VERSION, "kind": "Workloads", "namespaces": namespaces}
    blueprint = {"apiVersion": API_VERSION, "kind": "Blueprint",
                 "metadata": {"feasible": True, "source": source,
                              "nodes": {lab: src for lab, src in prod.node_map}},
                 "solution": {p.id: p.node for p in prod.pods}}
    return infra, workloads, blueprint
