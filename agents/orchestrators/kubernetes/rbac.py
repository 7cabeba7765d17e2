"""RBAC derived from requests (deploy/kubernetes: "nothing missing, nothing unused"). Pure.

:func:`permission` maps one API request to the RBAC rule it needs — ``(apiGroup, resource[/sub],
verb)``: ``GET`` of an object ``get``, of a collection ``list`` (``watch`` with ``?watch=true``),
``POST`` ``create``, ``PUT`` ``update``, ``PATCH`` ``patch``, ``DELETE`` ``delete`` (of a
collection ``deletecollection``); the request log of the test API server gives the requests.
:func:`kubelet_permission` maps a kubelet API path to what the kubelet's authorizer checks
(KubeletFineGrainedAuthz, Kubernetes ≥ 1.33: ``/pods`` → ``nodes/pods``, ``/stats/*`` →
``nodes/stats``, ``/metrics*`` → ``nodes/metrics``, ``/spec`` → ``nodes/spec``, else
``nodes/proxy``; without the gate ``/pods`` is ``nodes/proxy``). :func:`granted` expands a
ClusterRole's or Role's rules into the same triples.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping

_PATH = re.compile(r"^/(?:api/v1|apis/(?P<group>[a-z0-9.-]+)/(?P<version>v[0-9a-z]+))"
                   r"(?:/namespaces/(?P<ns>[^/]+))?/(?P<resource>[a-z0-9]+)(?:/(?P<name>[^/]+))?(?:/(?P<sub>[a-z]+))?$")
_VERBS = {"POST": "create", "PUT": "update", "PATCH": "patch"}

Permission = tuple[str, str, str]


def permission(method: str, path: str, query: Mapping[str, str] | None = None) -> Permission | None:
    """The RBAC triple a request needs; ``None`` for non-resource paths (``/version``)."""
    m = _PATH.match(path)
    if m is None:
        return None
    group = m["group"] or ""
    resource = m["resource"] + (f"/{m['sub']}" if m["sub"] else "")
    if method == "GET":
        verb = "get" if m["name"] else ("watch" if (query or {}).get("watch") in ("true", "1") else "list")
    elif method == "DELETE":
        verb = "delete" if m["name"] else "deletecollection"
    else:
        verb = _VERBS[method]
    return group, resource, verb


def kubelet_permission(path: str, *, fine_grained: bool = True) -> Permission:
    """What the kubelet's authorizer checks for ``path`` (see module doc)."""
    if path == "/pods" or path.startswith("/pods/"):
        return "", "nodes/pods" if fine_grained else "nodes/proxy", "get"
    for prefix, sub in (("/stats", "stats"), ("/metrics", "metrics"), ("/spec", "spec")):
        if path == prefix or path.startswith(prefix + "/"):
            return "", f"nodes/{sub}", "get"
    return "", "nodes/proxy", "get"


def required(requests: Iterable[tuple[str, str, Mapping[str, str]]]) -> set[Permission]:
    """Every triple the ``(verb, path, query)`` requests need."""
    return {p for method, path, query in requests if (p := permission(method, path, query)) is not None}


def granted(role: Mapping) -> set[Permission]:
    """The triples a ClusterRole/Role grants (``*`` is not expanded: a rule with ``*`` is reported
    as is, so a test comparing sets sees it)."""
    out: set[Permission] = set()
    for rule in role.get("rules") or []:
        for group in rule.get("apiGroups") or [""]:
            for resource in rule.get("resources") or []:
                for verb in rule.get("verbs") or []:
                    out.add((group, resource, verb))
    return out
