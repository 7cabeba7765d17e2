"""Production identity (docs/design.md §15): which blueprint entry a live production pod is.

The blueprint names pods as the IR unrolls them (``shop/web-0000``, ``shop/db-0`` when a
declaration has one replica, docs/design.md §3); a live cluster names them as their controllers do
(``shop/web-7d9c5b6f4-x2k9q``, ``shop/db-1``). A live pod is joined to an entry by owner and
replica, in this order:

1. **DaemonSet** owner → ``daemonset``: never an entry. A DaemonSet the infrastructure's Phase 0
   knows is never charged (Phase 0 already took it out of the node's capacity, docs/design.md §3); one
   it does not know (added after import) is an ``extra`` (:func:`daemonset_extra`).
2. **Forge label** ``kalena.naughtian.io/blueprint-pod: <namespace>/<pod>`` → that entry (a
   forge that renders a blueprint writes it; it wins over every rule below).
3. **Owner** (the controlling ``ownerReferences`` entry, ``Kind/name``):

   * ``StatefulSet/db`` → declaration ``db``, replica = the ordinal of the pod's name
     (``db-1`` → replica 1 → ``db-0001``; ``db-0`` → ``db-0`` when ``db`` has one replica);
   * ``ReplicaSet/web-7d9c5b6f4`` with label ``pod-template-hash: 7d9c5b6f4`` → declaration
     ``web``: the Deployment controller names its ReplicaSets ``<deployment>-<hash>`` and labels
     their pods with the hash, so stripping ``-<hash>`` from the ReplicaSet's name gives the
     Deployment's without reading the ReplicaSet (the watch holds only the pod). A ReplicaSet
     without the label (created by hand) is its own declaration; ``Deployment/web`` is ``web``.
     The pod takes the free replica of lowest index that the blueprint put on the pod's node;
     else the free replica of lowest index elsewhere (``moved``: a fidelity finding);
   * any other kind (``Job``, ``CronJob``…) names no declaration.
4. **Name**: a pod whose owner names no declaration keeps the entry of its own name
   (a bare pod rendered as the IR names it; a Docker container labelled with its workload id).
5. Otherwise ``extra``, with an :class:`ExtraReason`: counted once at ``r = q`` on its node.

A pod that already holds an entry (``held``, the claims the control plane persisted) keeps it,
so a restart or a re-list never reshuffles entries. Pods without a claim are matched with the
specific rules first (label, ordinal, name), then the replica rule, each group in order of start
time then name: during a rollout's surge the old pod keeps its entry and the new ReplicaSet's
pod is ``extra`` (charged once, at its request) until the old pod is gone and it inherits it.

Worked example — blueprint: ``shop/web`` 2 replicas (``web-0000`` on n1, ``web-0001`` on n2),
``shop/db`` 2 replicas (``db-0000`` on n1, ``db-0001`` on n2). Live pods (start in seconds)::

    shop/db-1                  StatefulSet/db                   n2  t=0    → mapped db-0001
    shop/web-7d9c5b6f4-x2k9q   ReplicaSet/web-7d9c5b6f4 (hash)  n2  t=0    → mapped web-0001
    shop/web-7d9c5b6f4-p8r2t   ReplicaSet/web-7d9c5b6f4 (hash)  n3  t=0    → moved  web-0000
    shop/web-5f6b8c9d7-aaaaa   ReplicaSet/web-5f6b8c9d7 (hash)  n1  t=800  → extra: declaration
                                                                             web has 2 replicas,
                                                                             all claimed
    shop/report-28h4k          Job/report                       n1         → extra: owned by
                                                                             Job/report, …

(``p8r2t`` comes before ``x2k9q`` at the same start: no replica of ``web`` is on n3, so it takes
the lowest free one, ``web-0000``; ``x2k9q`` then finds ``web-0001`` on its own node; ``aaaaa``
started last and finds none free.) A DaemonSet's pod (``kube-system/fluentd-8x2kq``) →
``daemonset``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from functools import cached_property

import numpy as np

BLUEPRINT_POD_LABEL = "kalena.naughtian.io/blueprint-pod"
TEMPLATE_HASH_LABEL = "pod-template-hash"

MAPPED, MOVED, EXTRA, DAEMONSET = "mapped", "moved", "extra", "daemonset"
#: The rule that gave a pod its entry (``Identity.rule``).
HELD, LABEL, ORDINAL, REPLICA, NAME = "held", "label", "ordinal", "replica", "name"
#: Owner kinds whose pods are blueprint replicas (``Deployment`` reached through its ReplicaSet).
REPLICA_KINDS = ("ReplicaSet", "Deployment")

_ORDINAL = re.compile(r"^(?P<base>.+)-(?P<ordinal>0|[1-9][0-9]*)$")
_UNROLLED = re.compile(r"^(?P<decl>.+)-(?P<index>[0-9]+)$")


@dataclass(frozen=True)
class LivePod:
    """A service-tier pod as the watch reports it.

    ``ref``: ``namespace/name``; ``node``: where it runs; ``owner``: ``Kind/name`` of its
    controlling owner reference (``""``: none); ``labels`` (``pod-template-hash`` and the forge
    label are read); ``start_s``: its start (Unix s, 0 = unknown), the tie-break between pods
    claiming the same entries; ``owner_error``: why the owner references could not be read
    (the pod is then ``extra``, never an exception).
    """

    ref: str
    node: str
    owner: str = ""
    labels: Mapping[str, str] = field(default_factory=dict)
    start_s: float = 0.0
    owner_error: str = ""

    @property
    def namespace(self) -> str:
        return self.ref.split("/", 1)[0] if "/" in self.ref else "default"

    @property
    def name(self) -> str:
        return self.ref.split("/", 1)[-1]


@dataclass(frozen=True)
class ExtraReason:
    """Why a live pod maps to no blueprint entry, as data (rendered by :meth:`text`).

    ``code`` is one of :data:`REASON_CODES`; the other fields are those the code uses.
    """

    code: str
    namespace: str = ""
    declaration: str = ""
    owner: str = ""
    replicas: int = 0
    ordinal: int = -1
    entry: str = ""
    holder: str = ""
    detail: str = ""

    def text(self) -> str:
        """The operator's sentence, e.g. ``no blueprint declaration web in namespace shop``."""
        return _TEXTS[self.code].format(**asdict(self))

    def to_dict(self) -> dict[str, object]:
        return {k: v for k, v in asdict(self).items() if v not in ("", -1) or k == "code"}

    @classmethod
    def from_dict(cls, data: Mapping[str, object]) -> ExtraReason:
        return cls(**{k: v for k, v in data.items() if k in cls.__dataclass_fields__})  # type: ignore[arg-type]


_TEXTS = {
    "no_owner": "a bare pod (no controller) whose name is no blueprint pod",
    "owner_unreadable": "its ownerReferences cannot be read: {detail}",
    "owner_kind": "owned by {owner}, a kind the blueprint does not declare (Deployment, ReplicaSet, StatefulSet)",
    "no_declaration": "no blueprint declaration {declaration} in namespace {namespace}",
    "all_claimed": "declaration {declaration} has {replicas} replicas, all claimed",
    "ordinal_beyond": "StatefulSet ordinal {ordinal}: declaration {declaration} has {replicas} replicas",
    "not_ordinal": "owned by {owner} but its name is not {declaration}-<ordinal>",
    "held": "blueprint pod {entry} is held by {holder}",
    "label_unknown": "label " + BLUEPRINT_POD_LABEL + " names {entry}, which is no blueprint pod",
    "daemonset_unknown": "DaemonSet {declaration} is not in the infrastructure's Phase 0",
}
REASON_CODES = tuple(_TEXTS)


@dataclass(frozen=True)
class Identity:
    """What one live pod is. ``outcome``: ``mapped`` (the entry, where the blueprint put it),
    ``moved`` (the entry, on another node: a fidelity finding), ``extra`` (no entry; ``reason``
    says why) or ``daemonset`` (not charged). ``entry``: the blueprint pod id; ``declaration``:
    ``namespace/declaration`` the pod belongs to (``""`` when none); ``rule``: how the entry was
    found (:data:`HELD`, :data:`LABEL`, :data:`ORDINAL`, :data:`REPLICA`, :data:`NAME`)."""

    ref: str
    outcome: str
    entry: str = ""
    declaration: str = ""
    rule: str = ""
    reason: ExtraReason | None = None


@dataclass(frozen=True, eq=False)
class BlueprintEntries:
    """The blueprint's production pods, ``e`` of them: ``ids`` (``namespace/pod``),
    ``namespaces``, ``declarations``, ``replica_index`` ``(e,)`` int and ``nodes`` (the node
    the blueprint put each on)."""

    ids: tuple[str, ...]
    namespaces: tuple[str, ...]
    declarations: tuple[str, ...]
    replica_index: np.ndarray
    nodes: tuple[str, ...]

    @classmethod
    def of(cls, rows: Sequence[tuple[str, str, str, int | None, str]]) -> BlueprintEntries:
        """From ``(id, namespace, declaration, replica index or None, node)`` rows; a None
        index is read from the id's unrolled suffix (``web-0002`` → 2), else 0."""
        index = [(_unrolled_index(r[0], r[2]) if r[3] is None else int(r[3])) for r in rows]
        return cls(ids=tuple(r[0] for r in rows), namespaces=tuple(r[1] for r in rows),
                   declarations=tuple(r[2] for r in rows), replica_index=np.array(index, dtype=np.int64),
                   nodes=tuple(r[4] for r in rows))

    def __len__(self) -> int:
        return len(self.ids)

    @cached_property
    def row_of(self) -> dict[str, int]:
        return {pod_id: i for i, pod_id in enumerate(self.ids)}

    @cached_property
    def by_declaration(self) -> dict[tuple[str, str], np.ndarray]:
        """``(namespace, declaration)`` → rows in replica order."""
        if not len(self):
            return {}
        keys = np.array([f"{ns}/{d}" for ns, d in zip(self.namespaces, self.declarations, strict=True)])
        order = np.lexsort((self.replica_index, keys))
        bounds = np.flatnonzero(np.r_[True, keys[order][1:] != keys[order][:-1], True])
        out = {}
        for a, b in zip(bounds[:-1], bounds[1:], strict=True):
            row = int(order[a])
            out[(self.namespaces[row], self.declarations[row])] = order[a:b]
        return out

    @cached_property
    def node_array(self) -> np.ndarray:
        return np.array(self.nodes, dtype=object)


def _unrolled_index(pod_id: str, declaration: str) -> int:
    match = _UNROLLED.match(pod_id.rsplit("/", 1)[-1])
    return int(match["index"]) if match and match["decl"] == declaration else 0


@dataclass(frozen=True)
class _Plan:
    """What a pod's owner says: ``rule`` (ordinal | replica | none), candidate declarations,
    the ordinal, and the reason to give when nothing matches."""

    rule: str
    declarations: tuple[str, ...] = ()
    ordinal: int = -1
    reason: ExtraReason | None = None


def owner_plan(pod: LivePod) -> _Plan:
    """Read ``pod``'s owner (module doc, rule 3); ``rule`` is ``daemonset``, ``ordinal``,
    ``replica`` or ``""`` (no declaration named, ``reason`` says why)."""
    ns = pod.namespace
    if pod.owner_error:
        return _Plan("", reason=ExtraReason("owner_unreadable", namespace=ns, detail=pod.owner_error))
    if not pod.owner:
        return _Plan("", reason=ExtraReason("no_owner", namespace=ns))
    kind, _, name = pod.owner.partition("/")
    if not kind or not name:
        return _Plan("", reason=ExtraReason("owner_unreadable", namespace=ns, detail=f"owner {pod.owner!r}"))
    if kind == "DaemonSet":
        return _Plan(DAEMONSET, (name,))
    if kind == "StatefulSet":
        match = _ORDINAL.match(pod.name)
        if not match or match["base"] != name:
            return _Plan("", reason=ExtraReason("not_ordinal", namespace=ns, declaration=name, owner=pod.owner))
        return _Plan(ORDINAL, (name,), ordinal=int(match["ordinal"]))
    if kind == "ReplicaSet":
        digest = pod.labels.get(TEMPLATE_HASH_LABEL, "")
        if digest and name.endswith(f"-{digest}") and len(name) > len(digest) + 1:
            return _Plan(REPLICA, (name[:-len(digest) - 1], name))
        return _Plan(REPLICA, (name,))
    if kind == "Deployment":
        return _Plan(REPLICA, (name,))
    return _Plan("", reason=ExtraReason("owner_kind", namespace=ns, owner=pod.owner))


def candidate_declarations(pod: LivePod) -> tuple[str, ...]:
    """The declaration names (in ``pod``'s namespace) its owner may name — what the control
    plane loads entries for besides the pod's own name and its forge label."""
    plan = owner_plan(pod)
    return plan.declarations if plan.rule in (ORDINAL, REPLICA) else ()


def production_identity(pods: Sequence[LivePod], entries: BlueprintEntries, *,
                        held: Mapping[str, str] | None = None) -> tuple[Identity, ...]:
    """Map live production pods to blueprint entries (module doc); one :class:`Identity` per pod,
    in the order of ``pods``.

    Args:
        pods: the live service-tier pods to map (refs unique).
        entries: the blueprint's production pods (only those of the pods' declarations, names
            and labels are needed).
        held: blueprint pod id → ref of the live pod holding it now. A holder among ``pods``
            keeps its entry; an entry held by a pod not among ``pods`` is not free.

    Deterministic: the same inputs give the same answer whatever the order of ``held``; the
    order of ``pods`` matters only through its refs and start times.
    """
    held = dict(held or {})
    taken = np.zeros(len(entries), dtype=bool)
    holder: dict[int, str] = {}
    out: dict[str, Identity] = {}
    refs = {p.ref for p in pods}
    for entry_id, ref in sorted(held.items()):
        row = entries.row_of.get(entry_id)
        if row is None:
            continue
        taken[row], holder[row] = True, ref
    by_ref = {p.ref: p for p in pods}
    for row, ref in sorted(holder.items()):
        if ref in refs and ref not in out:
            out[ref] = _claimed(by_ref[ref], entries, row, HELD)
    rest = sorted((p for p in pods if p.ref not in out), key=lambda p: (p.start_s, p.ref))
    plans = {p.ref: owner_plan(p) for p in rest}
    for p in rest:  # specific claims first: daemonset, label, ordinal, name
        plan = plans[p.ref]
        if plan.rule == DAEMONSET:
            out[p.ref] = Identity(p.ref, DAEMONSET, declaration=f"{p.namespace}/{plan.declarations[0]}",
                                  rule=DAEMONSET)
            continue
        label = p.labels.get(BLUEPRINT_POD_LABEL)
        if label:
            out[p.ref] = _specific(p, entries, label, LABEL, taken, holder, "", missing=ExtraReason(
                "label_unknown", namespace=p.namespace, entry=label))
            continue
        if plan.rule == ORDINAL:
            decl = plan.declarations[0]
            rows = entries.by_declaration.get((p.namespace, decl))
            if rows is not None:
                match = rows[entries.replica_index[rows] == plan.ordinal]
                if len(match):
                    out[p.ref] = _specific(p, entries, entries.ids[int(match[0])], ORDINAL, taken, holder,
                                           f"{p.namespace}/{decl}")
                else:
                    out[p.ref] = Identity(p.ref, EXTRA, declaration=f"{p.namespace}/{decl}", reason=ExtraReason(
                        "ordinal_beyond", namespace=p.namespace, declaration=decl, replicas=len(rows),
                        ordinal=plan.ordinal))
                continue
        elif plan.rule == REPLICA and _declaration_of(p, plan, entries) is not None:
            continue  # the replica rule, below
        reason = plan.reason or ExtraReason("no_declaration", namespace=p.namespace, declaration=plan.declarations[0])
        if p.ref in entries.row_of:
            out[p.ref] = _specific(p, entries, p.ref, NAME, taken, holder, "")
        else:
            out[p.ref] = Identity(p.ref, EXTRA, reason=reason)
    for p in rest:  # the replica rule: on the blueprint's node first, then anywhere
        if p.ref in out:
            continue
        decl = _declaration_of(p, plans[p.ref], entries)
        rows = entries.by_declaration[(p.namespace, decl)]
        free = rows[~taken[rows]]
        here = free[entries.node_array[free] == p.node]
        if len(here) or len(free):
            row = int(here[0] if len(here) else free[0])
            taken[row], holder[row] = True, p.ref
            out[p.ref] = _claimed(p, entries, row, REPLICA)
        else:
            out[p.ref] = Identity(p.ref, EXTRA, declaration=f"{p.namespace}/{decl}", reason=ExtraReason(
                "all_claimed", namespace=p.namespace, declaration=decl, replicas=len(rows)))
    return tuple(out[p.ref] for p in pods)


def daemonset_extra(identity: Identity) -> Identity:
    """A ``daemonset`` identity whose DaemonSet is not in the infrastructure's Phase 0 → an
    ``extra`` (charged once on its node, at its request) with reason ``daemonset_unknown``.

    Example: ``Identity("kube-system/node-exporter-4k2jd", "daemonset",
    declaration="kube-system/node-exporter")`` → ``extra``, reason text "DaemonSet
    kube-system/node-exporter is not in the infrastructure's Phase 0"; ``declaration`` becomes
    ``""`` (it names no blueprint declaration: no entry is ever inherited by it).

    Raises:
        ValueError: ``identity`` is not a ``daemonset`` identity.
    """
    if identity.outcome != DAEMONSET:
        raise ValueError(f"{identity.ref}: {identity.outcome!r} is not a daemonset identity")
    namespace, _, name = identity.declaration.partition("/")
    return Identity(identity.ref, EXTRA, reason=ExtraReason("daemonset_unknown", namespace=namespace,
                                                            declaration=identity.declaration,
                                                            owner=f"DaemonSet/{name}"))


def _declaration_of(pod: LivePod, plan: _Plan, entries: BlueprintEntries) -> str | None:
    return next((d for d in plan.declarations if (pod.namespace, d) in entries.by_declaration), None)


def _claimed(pod: LivePod, entries: BlueprintEntries, row: int, rule: str) -> Identity:
    return Identity(pod.ref, MAPPED if entries.nodes[row] == pod.node else MOVED, entry=entries.ids[row],
                    declaration=f"{entries.namespaces[row]}/{entries.declarations[row]}", rule=rule)


def _specific(pod: LivePod, entries: BlueprintEntries, entry_id: str, rule: str, taken: np.ndarray,
              holder: dict[int, str], declaration: str, missing: ExtraReason | None = None) -> Identity:
    row = entries.row_of.get(entry_id)
    if row is None:
        return Identity(pod.ref, EXTRA, declaration=declaration, reason=missing)
    if taken[row] and holder.get(row) != pod.ref:
        return Identity(pod.ref, EXTRA, declaration=f"{entries.namespaces[row]}/{entries.declarations[row]}",
                        reason=ExtraReason("held", namespace=pod.namespace, entry=entry_id, holder=holder[row]))
    taken[row], holder[row] = True, pod.ref
    return _claimed(pod, entries, row, rule)


def interchangeable_declarations(pods: Sequence) -> set[tuple[str, str]]:
    """The ``(namespace, declaration)`` groups of ``pods`` (Kuberina :class:`PodSpec` s) whose
    replicas are interchangeable: two or more, with equal requests, limits and labels, and no
    pod's affinity or anti-affinity naming some of them but not all (the IR unrolls a
    declaration's targets to every replica, so only a hand-written pod list can break this)."""
    groups: dict[tuple[str, str], list] = {}
    for pod in pods:
        groups.setdefault((pod.namespace, pod.declaration), []).append(pod)
    key_of = {pod.id: (pod.namespace, pod.declaration) for pod in pods}
    out = {key for key, members in groups.items() if len(members) > 1 and all(
        np.array_equal(m.requests, members[0].requests)
        and (m.limits is None) == (members[0].limits is None)
        and (m.limits is None or np.array_equal(m.limits, members[0].limits))
        and dict(m.labels) == dict(members[0].labels) for m in members)}
    for pod in pods:
        for targets in (pod.affinity, pod.anti_affinity):
            named: dict[tuple[str, str], int] = {}
            for target in targets:
                if target in key_of:
                    named[key_of[target]] = named.get(key_of[target], 0) + 1
            out -= {key for key, n in named.items() if n != len(groups[key])}
    return out


def renumbered_replicas(groups: Sequence[str], planned: Sequence[str], seen: Sequence[str]) -> list[str]:
    """A new blueprint's node per pod, with the nodes of interchangeable replicas renumbered so
    that a live pod keeps a replica where it runs when the blueprint puts one of its declaration
    there (docs/design.md §15: a live pod holds *a* replica of its declaration by owner and replica, so
    a re-plan that only renumbers replicas between nodes moves no one).

    Args:
        groups: per pod, its interchangeable group (``""``: keep ``planned``).
        planned: per pod, the node the new blueprint names.
        seen: per pod, the node its live pod runs on (``""``: none seen).

    Each group keeps its multiset of planned nodes. In order: a pod already planned where it
    runs keeps that; a pod seen on a node still left in its group's multiset takes it; a pod
    whose planned node is still left keeps it; the rest take what is left, in pod order.

    Example — ``web`` replicas 0, 1, 2 planned on b, a, a; live on a, a, b → a, a, b (replica 1
    keeps a; 0 takes the other a; 2 takes b): nobody moved, while the literal plan would make
    replicas 0 and 2 fidelity findings.
    """
    out = list(planned)
    members: dict[str, list[int]] = {}
    for i, group in enumerate(groups):
        if group:
            members.setdefault(group, []).append(i)
    for rows in members.values():
        left: dict[str, int] = {}
        for i in rows:
            left[planned[i]] = left.get(planned[i], 0) + 1
        chosen: dict[int, str] = {}
        passes = (lambda i: seen[i] if seen[i] == planned[i] else "",
                  lambda i: seen[i],
                  lambda i: planned[i])
        for pick in passes:
            for i in rows:
                node = pick(i) if i not in chosen else ""
                if node and left.get(node, 0) > 0:
                    chosen[i], left[node] = node, left[node] - 1
        rest = [node for node in sorted(left) for _ in range(left[node])]
        for i in rows:
            out[i] = chosen[i] if i in chosen else rest.pop(0)
    return out
