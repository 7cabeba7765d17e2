"""Reader for the Kuberina blueprint (solution) document (IR v1 §4, docs/design.md §3)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from kalena_engine.errors import BlueprintRefused
from kalena_engine.kuberina.fields import check_header
from kalena_engine.kuberina.model import Blueprint, Workloads
from kalena_engine.kuberina.yamlio import Where, load_yaml

_TOP_KEYS = ("apiVersion", "kind", "metadata", "solution")


def load_blueprint(path: str | Path, workloads: Workloads) -> Blueprint:
    """Read a blueprint and key it by pod id (``namespace/pod``).

    Older solutions key pods by bare name (``irina-186-3d``); a bare name resolves to the one
    pod of ``workloads`` with that name. Keys that match no pod are kept in
    ``Blueprint.unknown_pods`` (blueprint verification counts them as hard violations).

    Raises:
        BlueprintRefused: ``metadata.feasible`` is false — such a plan must not be applied; or
            the solution names pods but not one of them is a pod of ``workloads`` (the blueprint
            was made for other workloads).
        IRError: malformed document, a non-string node, or a bare name shared by two namespaces.
    """
    return parse_blueprint(load_yaml(path), workloads, source=str(path))


def parse_blueprint(doc: Any, workloads: Workloads, *, source: str) -> Blueprint:
    """Parse an already-loaded blueprint document (see :func:`load_blueprint`)."""
    where = Where(source)
    doc = where.expect_mapping(doc)
    where.expect_keys(doc, _TOP_KEYS)
    check_header(doc, where, "Blueprint")
    metadata = dict(where.key(doc, "metadata").expect_mapping(doc.get("metadata") or {}))
    if metadata.get("feasible") is False:
        raise BlueprintRefused(
            "metadata.feasible is false: the plan breaches real capacity and must not be applied",
            source=source, line=getattr(doc, "key_lines", {}).get("metadata"), field="metadata.feasible",
            accepted="a blueprint whose metadata says feasible: true (or carries no metadata)",
        )
    if "solution" not in doc:
        raise where.error("a blueprint needs a solution: mapping", accepted="solution: {namespace/pod: node}")
    sw = where.key(doc, "solution")
    solution = sw.expect_mapping(doc["solution"])
    bare: dict[str, list[str]] = {}
    for pod in workloads.pods:
        bare.setdefault(pod.name, []).append(pod.id)
    assignment: dict[str, str] = {}
    unknown: list[str] = []
    for key, node in solution.items():
        at = sw.key(solution, key)
        node = at.expect_str(node)
        key = str(key)
        if key in workloads.index:
            pod_id = key
        elif key in bare and len(bare[key]) == 1:
            pod_id = bare[key][0]
        elif key in bare:
            raise at.error(f"bare pod name {key!r} is ambiguous: {', '.join(bare[key])}",
                           accepted="namespace/pod keys")
        else:
            unknown.append(key)
            continue
        if pod_id in assignment:
            raise at.error(f"pod {pod_id} is assigned twice")
        assignment[pod_id] = node
    if unknown and not assignment:
        raise BlueprintRefused(
            f"none of the solution's {len(unknown):,} pods (e.g. {unknown[0]!r}) is a pod of the workloads "
            f"{workloads.source} ({len(workloads.pods):,} pods, e.g. {workloads.pods[0].id if workloads.pods else 'none'!r}): "
            "this blueprint was made for other workloads",
            source=source, line=getattr(doc, "key_lines", {}).get("solution"), field="solution",
            accepted="the blueprint Kuberina solved for these workloads (--blueprint)",
        )
    return Blueprint(source=source, assignment=assignment, metadata=metadata, unknown_pods=tuple(unknown))
