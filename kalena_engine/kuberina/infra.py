"""Reader for the Kuberina infrastructure document (IR v1 §2, docs/design.md §3)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from kalena_engine.kuberina.fields import (
    check_header, parse_key_list, parse_resource_block, parse_string_map, parse_taints,
)
from kalena_engine.kuberina.model import DaemonSetSpec, Infrastructure, NodeSpec
from kalena_engine.kuberina.yamlio import Where, load_yaml

_TOP_KEYS = ("apiVersion", "kind", "nodes", "daemonsets")
_NODE_KEYS = ("name", "zone", "rack", "labels", "taints", "allocatable")
_DS_KEYS = ("name", "resources", "nodeSelector", "tolerations")


def load_infrastructure(path: str | Path) -> Infrastructure:
    """Read an infrastructure file.

    Returns:
        :class:`Infrastructure` with nodes in file order.

    Raises:
        IRError: naming the file, line and field of the first problem; nothing is returned
            half-loaded.
    """
    return parse_infrastructure(load_yaml(path), source=str(path))


def parse_infrastructure(doc: Any, *, source: str) -> Infrastructure:
    """Parse an already-loaded infrastructure document (see :func:`load_infrastructure`)."""
    where = Where(source)
    doc = where.expect_mapping(doc)
    where.expect_keys(doc, _TOP_KEYS)
    version = check_header(doc, where, "Infrastructure")
    nodes_where = where.key(doc, "nodes")
    if "nodes" not in doc:
        raise where.error("an infrastructure document needs a nodes: list", accepted="nodes: [...]")
    raw_nodes = nodes_where.expect_list(doc["nodes"])
    nodes: list[NodeSpec] = []
    seen: dict[str, int] = {}
    for i, raw in enumerate(raw_nodes):
        at = nodes_where.item(raw_nodes, i)
        node = at.expect_mapping(raw)
        name = at.key(node, "name").expect_str(node.get("name"))
        at = nodes_where.item(raw_nodes, i, name)
        at.expect_keys(node, _NODE_KEYS)
        if name in seen:
            raise at.key(node, "name").error(f"duplicate node name {name!r} (first at nodes[{seen[name]}])")
        seen[name] = i
        nodes.append(NodeSpec(
            name=name,
            zone=str(node.get("zone") or ""),
            rack=str(node.get("rack") or ""),
            labels=parse_string_map(node.get("labels"), at.key(node, "labels")),
            taints=parse_taints(node.get("taints"), at.key(node, "taints")),
            allocatable=parse_resource_block(node.get("allocatable"), at.key(node, "allocatable"), capacity=True),
        ))
    daemonsets: list[DaemonSetSpec] = []
    if doc.get("daemonsets") is not None:
        ds_where = where.key(doc, "daemonsets")
        raw_ds = ds_where.expect_list(doc["daemonsets"])
        for i, raw in enumerate(raw_ds):
            at = ds_where.item(raw_ds, i)
            ds = at.expect_mapping(raw)
            name = at.key(ds, "name").expect_str(ds.get("name"))
            at = ds_where.item(raw_ds, i, name)
            at.expect_keys(ds, _DS_KEYS)
            daemonsets.append(DaemonSetSpec(
                name=name,
                resources=parse_resource_block(ds.get("resources"), at.key(ds, "resources"), capacity=False),
                node_selector=parse_string_map(ds.get("nodeSelector"), at.key(ds, "nodeSelector")),
                tolerations=parse_key_list(ds.get("tolerations"), at.key(ds, "tolerations")),
            ))
    return Infrastructure(source=source, nodes=tuple(nodes), daemonsets=tuple(daemonsets), api_version=version)
