"""Field parsers shared by the infrastructure, workloads and blueprint readers (IR v1 §1)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from kalena_engine.kuberina.model import Taint, Toleration
from kalena_engine.kuberina.quantity import parse_quantity
from kalena_engine.kuberina.yamlio import Where
from kalena_engine.resources import DIM_INDEX, DIMS, IR_TO_INTERNAL, N_DIMS

API_VERSION = "kuberina.io/v1"

#: what a flat or Kubernetes spelling of a resource key should be written as
FLAT_HINTS = {
    "disk_read": "write the nested form disk: {read: …}",
    "disk_write": "write the nested form disk: {write: …}",
    "net_in": "write the nested form network: {in: …}",
    "net_out": "write the nested form network: {out: …}",
    "network_in": "write the nested form network: {in: …}",
    "network_out": "write the nested form network: {out: …}",
    "memory": "Kuberina calls it ram",
}
_BLOCK_KEYS = ("cpu", "ram", "gpu", "storage", "disk", "network")


def check_header(doc: Mapping[str, Any], where: Where, kind: str) -> str:
    """Validate the optional IR v1 header; return the apiVersion ('' when absent).

    Raises:
        IRError: an apiVersion other than ``kuberina.io/v1``, or a kind other than ``kind``.
    """
    version = doc.get("apiVersion", "")
    if version and version != API_VERSION:
        raise where.key(doc, "apiVersion").error(
            f"apiVersion {version!r} is not implemented by this reader", accepted=API_VERSION,
        )
    found = doc.get("kind")
    if found is not None and found != kind:
        raise where.key(doc, "kind").error(
            f"kind {found!r} does not match a {kind} document", accepted=kind,
        )
    return str(version)


def parse_resource_block(raw: Any, where: Where, *, capacity: bool) -> np.ndarray:
    """Parse a resource block into an ``(8,)`` vector in internal units.

    Omitted dimensions are 0 for demand. For a node's allocatable (``capacity=True``) omitted
    cpu, ram and gpu are 0 and omitted storage, disk and network are unconstrained (+inf):
    docs/design.md §3 resolves the upstream inconsistency this way (the solver's rule for cpu/ram/gpu,
    the spec's for the rest).

    Raises:
        IRError: for a flat key such as ``disk_read`` (naming the nested form), an unknown key,
            or a value that is not a quantity.
    """
    out = np.zeros(N_DIMS)
    if capacity:
        out[DIM_INDEX["storage"]:] = np.inf
    if raw is None:
        return out
    block = where.expect_mapping(raw)
    where.expect_keys(block, _BLOCK_KEYS, FLAT_HINTS)
    for name in ("cpu", "ram", "gpu", "storage"):
        if name in block:
            out[DIM_INDEX[name]] = parse_quantity(name, block[name], where.key(block, name))
    for outer, pairs in (("disk", ("read", "write")), ("network", ("in", "out"))):
        if outer not in block:
            continue
        inner_where = where.key(block, outer)
        inner = inner_where.expect_mapping(block[outer])
        inner_where.expect_keys(inner, pairs)
        for short in pairs:
            dim = ("disk_" if outer == "disk" else "net_") + short
            if short in inner:
                out[DIM_INDEX[dim]] = parse_quantity(dim, inner[short], inner_where.key(inner, short))
    with np.errstate(invalid="ignore", over="ignore"):  # inf · 0 and overflow: checked below
        internal = out * IR_TO_INTERNAL
    for d in np.flatnonzero(np.isinf(internal) & np.isfinite(out)):
        raise where.error(f"{DIMS[d]}: {out[d]:g} is too large", accepted="a quantity that fits the internal unit")
    return internal


def parse_string_map(raw: Any, where: Where) -> dict[str, str]:
    """Parse a ``map[string]string`` (labels, nodeSelector). YAML booleans and numbers become
    their YAML spelling (``true``, ``3``), as Kubernetes label values are strings."""
    if raw is None:
        return {}
    mapping = where.expect_mapping(raw)
    out: dict[str, str] = {}
    for key, value in mapping.items():
        if isinstance(value, Mapping | list) or value is None:
            raise where.key(mapping, key).error(f"label value {value!r} must be a string")
        if isinstance(value, bool):
            value = "true" if value else "false"
        out[str(key)] = str(value)
    return out


def parse_taints(raw: Any, where: Where) -> tuple[Taint, ...]:
    """Parse ``taints: [{key, value, effect}]``; an omitted effect is ``NoSchedule``."""
    if raw is None:
        return ()
    items = where.expect_list(raw)
    taints = []
    for i, item in enumerate(items):
        at = where.item(items, i)
        taint = at.expect_mapping(item)
        at.expect_keys(taint, ("key", "value", "effect"))
        key = at.key(taint, "key").expect_str(taint.get("key"))
        effect = str(taint.get("effect") or "NoSchedule")
        if effect not in ("NoSchedule", "NoExecute", "PreferNoSchedule"):
            raise at.key(taint, "effect").error(
                f"unknown taint effect {effect!r}", accepted="NoSchedule, PreferNoSchedule, NoExecute",
            )
        taints.append(Taint(key=key, value=str(taint.get("value") or ""), effect=effect))
    return tuple(taints)


def parse_tolerations(raw: Any, where: Where) -> tuple[Toleration, ...]:
    """Parse pod tolerations: a bare key means ``operator: Exists`` for that key; a mapping
    takes the Kubernetes fields ``key, operator, value, effect``."""
    if raw is None:
        return ()
    items = where.expect_list(raw)
    out = []
    for i, item in enumerate(items):
        at = where.item(items, i)
        if isinstance(item, str):
            out.append(Toleration(key=item, operator="Exists"))
            continue
        tol = at.expect_mapping(item)
        at.expect_keys(tol, ("key", "operator", "value", "effect", "tolerationSeconds"))
        operator = str(tol.get("operator") or ("Equal" if tol.get("value") else "Exists"))
        if operator not in ("Exists", "Equal"):
            raise at.key(tol, "operator").error(f"unknown operator {operator!r}", accepted="Exists, Equal")
        out.append(Toleration(
            key=str(tol.get("key") or ""), operator=operator,
            value=str(tol.get("value") or ""), effect=str(tol.get("effect") or ""),
        ))
    return tuple(out)


def parse_key_list(raw: Any, where: Where) -> tuple[str, ...]:
    """Parse a list of strings (DaemonSet tolerations as taint keys, affinity targets).

    A mapping item with a ``key`` is accepted for DaemonSet tolerations written the Kubernetes way.
    """
    if raw is None:
        return ()
    items = where.expect_list(raw)
    out = []
    for i, item in enumerate(items):
        at = where.item(items, i)
        if isinstance(item, Mapping) and isinstance(item.get("key"), str):
            out.append(item["key"])
        else:
            out.append(at.expect_str(item))
    return tuple(out)


def parse_int(raw: Any, where: Where, *, minimum: int = 0) -> int:
    """Parse an integer ≥ ``minimum``."""
    if isinstance(raw, bool) or not isinstance(raw, int) or raw < minimum:
        raise where.error(f"{raw!r} is not an integer ≥ {minimum}", accepted=f"an integer ≥ {minimum}")
    return raw
