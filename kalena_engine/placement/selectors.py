"""Kubernetes label selectors, pod anti-affinity terms and topology spread constraints, as
batch placement reads them (docs/design.md §3, §9).

A :class:`LabelSelector` is Kubernetes' ``metav1.LabelSelector``: every ``matchLabels`` pair
and every ``matchExpressions`` requirement must hold (operators ``In``, ``NotIn``, ``Exists``,
``DoesNotExist``). An empty selector matches every pod, as in Kubernetes. Example:
``LabelSelector.of(app="noisy-io").matches({"app": "noisy-io", "team": "x"})`` is True.

A required node affinity is a tuple of :class:`NodeSelectorTerm` (ORed), each of
:class:`NodeRequirement` (ANDed; ``Gt``/``Lt`` too). Example: the term
``accelerator in (a100,h100), gpu-count gt (3)`` matches a node labelled
``accelerator=a100, gpu-count=4``.

Topology keys name a node's domain: ``kubernetes.io/hostname`` (the node itself),
``topology.kubernetes.io/zone`` or Kuberina's ``zone``, ``topology.kubernetes.io/rack`` or
``rack``; any other key is read from the node's labels (a node without it is in no domain).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from kalena_engine.errors import InputError

HOSTNAME = "kubernetes.io/hostname"
ZONE_KEYS = frozenset({"zone", "topology.kubernetes.io/zone", "failure-domain.beta.kubernetes.io/zone"})
RACK_KEYS = frozenset({"rack", "topology.kubernetes.io/rack"})
OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist")


@dataclass(frozen=True)
class Requirement:
    """One ``matchExpressions`` entry.

    Raises:
        InputError: an unknown operator, or values given with Exists/DoesNotExist, or none
            with In/NotIn (the Kubernetes validation rules).
    """

    key: str
    operator: str
    values: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.operator not in OPERATORS:
            raise InputError(f"operator {self.operator!r} is not supported", field="matchExpressions.operator",
                             accepted=", ".join(OPERATORS))
        if self.operator in ("In", "NotIn") and not self.values:
            raise InputError(f"{self.operator} needs at least one value", field=f"matchExpressions[{self.key}].values")
        if self.operator in ("Exists", "DoesNotExist") and self.values:
            raise InputError(f"{self.operator} takes no values", field=f"matchExpressions[{self.key}].values")

    def matches(self, labels: Mapping[str, str]) -> bool:
        if self.operator == "Exists":
            return self.key in labels
        if self.operator == "DoesNotExist":
            return self.key not in labels
        if self.operator == "In":
            return labels.get(self.key) in self.values
        return labels.get(self.key) not in self.values  # NotIn: an absent key matches

    def __str__(self) -> str:
        if self.operator in ("Exists", "DoesNotExist"):
            return f"{'!' if self.operator == 'DoesNotExist' else ''}{self.key}"
        return f"{self.key} {self.operator.lower()} ({','.join(self.values)})"


@dataclass(frozen=True)
class LabelSelector:
    """Kubernetes ``LabelSelector``; ``match_labels`` is stored as a sorted tuple of pairs so
    selectors are hashable (equivalence classes and caches key on them)."""

    match_labels: tuple[tuple[str, str], ...] = ()
    match_expressions: tuple[Requirement, ...] = ()

    @classmethod
    def of(cls, match_labels: Mapping[str, str] | None = None, *, expressions: tuple[Requirement, ...] = (),
           **labels: str) -> LabelSelector:
        """``LabelSelector.of(app="db")`` or ``LabelSelector.of({"app": "db"}, expressions=…)``."""
        pairs = {**dict(match_labels or {}), **labels}
        return cls(tuple(sorted(pairs.items())), tuple(expressions))

    def matches(self, labels: Mapping[str, str]) -> bool:
        return all(labels.get(k) == v for k, v in self.match_labels) and all(
            r.matches(labels) for r in self.match_expressions)

    def __str__(self) -> str:
        parts = [f"{k}={v}" for k, v in self.match_labels] + [str(r) for r in self.match_expressions]
        return ",".join(parts) or "<everything>"


NODE_OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt")


@dataclass(frozen=True)
class NodeRequirement:
    """One ``nodeSelectorTerms[].matchExpressions`` (a node label, ``field=False``) or
    ``matchFields`` (``metadata.name``, ``field=True``) entry of a required node affinity
    (core/v1 NodeSelectorRequirement). ``Gt``/``Lt`` take one integer and compare it with the
    label read as an integer (a label that is not one does not match), as the kubelet does.

    Raises:
        InputError: an unknown operator, a field other than ``metadata.name``, or values that
            do not fit the operator (the Kubernetes validation rules).
    """

    key: str
    operator: str
    values: tuple[str, ...] = ()
    field: bool = False

    def __post_init__(self) -> None:
        where = f"nodeAffinity.{'matchFields' if self.field else 'matchExpressions'}[{self.key}]"
        if self.operator not in (("In", "NotIn") if self.field else NODE_OPERATORS):
            raise InputError(f"operator {self.operator!r} is not supported", field=f"{where}.operator",
                             accepted=", ".join(("In", "NotIn") if self.field else NODE_OPERATORS))
        if self.field and self.key != "metadata.name":
            raise InputError(f"field {self.key!r} is not supported", field=where, accepted="metadata.name")
        if self.operator in ("In", "NotIn") and not self.values:
            raise InputError(f"{self.operator} needs at least one value", field=f"{where}.values")
        if self.operator in ("Exists", "DoesNotExist") and self.values:
            raise InputError(f"{self.operator} takes no values", field=f"{where}.values")
        if self.operator in ("Gt", "Lt") and (len(self.values) != 1 or not _is_int(self.values[0])):
            raise InputError(f"{self.operator} takes one integer", field=f"{where}.values")

    def matches(self, labels: Mapping[str, str], name: str) -> bool:
        if self.field:
            return (name in self.values) == (self.operator == "In")
        if self.operator in ("Exists", "DoesNotExist"):
            return (self.key in labels) == (self.operator == "Exists")
        if self.operator in ("In", "NotIn"):
            return (labels.get(self.key) in self.values) == (self.operator == "In")
        found = labels.get(self.key)
        if found is None or not _is_int(found):
            return False
        return int(found) > int(self.values[0]) if self.operator == "Gt" else int(found) < int(self.values[0])

    def __str__(self) -> str:
        key = "metadata.name" if self.field else self.key
        if self.operator in ("Exists", "DoesNotExist"):
            return f"{'!' if self.operator == 'DoesNotExist' else ''}{key}"
        return f"{key} {self.operator.lower()} ({','.join(self.values)})"


@dataclass(frozen=True)
class NodeSelectorTerm:
    """One of a required node affinity's ``nodeSelectorTerms``: every requirement must hold. A
    node matches the affinity when it matches any term (Kubernetes: the terms are ORed, an empty
    term matches no node)."""

    requirements: tuple[NodeRequirement, ...] = ()

    def matches(self, labels: Mapping[str, str], name: str) -> bool:
        return bool(self.requirements) and all(r.matches(labels, name) for r in self.requirements)

    def __str__(self) -> str:
        return ",".join(str(r) for r in self.requirements) or "<nothing>"


_INT64 = 2**63


def _is_int(text: str) -> bool:
    """Whether ``text`` is what Kubernetes' ``strconv.ParseInt(text, 10, 64)`` accepts: an
    optional sign and decimal digits within int64 (Python's ``int`` also takes ``1_0`` and spaces)."""
    if not isinstance(text, str) or not text.lstrip("+-").isdigit() or text[:2] in ("+-", "-+", "--", "++") or \
            not text.lstrip("+-").isascii():
        return False
    return -_INT64 <= int(text) < _INT64


@dataclass(frozen=True)
class AntiAffinityTerm:
    """A required pod anti-affinity term (``requiredDuringSchedulingIgnoredDuringExecution``):
    no pod matching ``selector`` in the same ``topology_key`` domain. ``namespaces`` empty =
    every namespace (Kalena reads Kuberina's cluster-wide names; a Kubernetes adapter fills in
    the term's own namespace when the manifest names none)."""

    selector: LabelSelector
    topology_key: str = HOSTNAME
    namespaces: tuple[str, ...] = ()

    def matches(self, labels: Mapping[str, str], namespace: str) -> bool:
        return (not self.namespaces or namespace in self.namespaces) and self.selector.matches(labels)

    def __str__(self) -> str:
        return f"{self.selector} @ {self.topology_key}"


def label_selector_of(raw: Mapping[str, Any] | None, field: str) -> LabelSelector:
    """Kubernetes ``{matchLabels, matchExpressions}`` (JSON) → :class:`LabelSelector`; ``None``
    or ``{}`` is the empty selector (every pod).

    Raises:
        InputError: a malformed selector, naming ``field`` (``….matchExpressions[0]``).
    """
    raw = raw or {}
    if not isinstance(raw, Mapping):
        raise InputError("a label selector must be a mapping", field=field, accepted="{matchLabels, matchExpressions}")
    labels = raw.get("matchLabels") or {}
    if not isinstance(labels, Mapping) or not all(isinstance(k, str) and isinstance(v, str) for k, v in labels.items()):
        raise InputError("matchLabels must map label names to string values", field=f"{field}.matchLabels",
                         accepted='{"app": "train"}')
    items = raw.get("matchExpressions") or []
    if not isinstance(items, list):
        raise InputError("expected a list", field=f"{field}.matchExpressions")
    expressions = []
    for i, item in enumerate(items):
        values = item.get("values") if isinstance(item, Mapping) else None
        if not isinstance(item, Mapping) or not isinstance(item.get("key"), str) or \
                not isinstance(item.get("operator"), str) or not isinstance(values or [], list) or \
                not all(isinstance(v, str) for v in values or []):
            raise InputError("an expression needs a string key and operator and a list of string values",
                             field=f"{field}.matchExpressions[{i}]",
                             accepted="{key, operator: In|NotIn|Exists|DoesNotExist, values: [strings]}")
        try:
            expressions.append(Requirement(item["key"], item["operator"], tuple(values or ())))
        except InputError as exc:
            raise InputError(exc.problem, field=f"{field}.matchExpressions[{i}]", accepted=exc.accepted) from None
    return LabelSelector.of(dict(labels), expressions=tuple(expressions))


def anti_affinity_terms_of(raw: Sequence[Any] | None, field: str) -> tuple[AntiAffinityTerm, ...]:
    """Required anti-affinity terms in Kalena's constraint shape — a list of
    ``{labelSelector, topologyKey, namespaces}`` (JSON) — → :class:`AntiAffinityTerm` tuple.
    ``topologyKey`` absent: ``kubernetes.io/hostname``; ``namespaces`` absent or empty: every
    namespace; a term without a ``labelSelector`` key is read as the selector itself (the REST
    API's short form ``{"matchLabels": …}``). Both the batch pod's own terms and a resident
    production pod's (docs/design.md §9) are read here.

    Example: ``[{"labelSelector": {"matchLabels": {"app": "noisy"}}, "namespaces": ["web"]}]``
    → one term ``app=noisy @ kubernetes.io/hostname`` matching pods labelled ``app=noisy`` in
    namespace ``web``.

    Raises:
        InputError: naming ``field[i]…`` (a term that is not a mapping, a topology key that is
            not a string, namespaces that are not a list of strings, a malformed selector).
    """
    if raw is None:
        return ()
    if not isinstance(raw, Sequence) or isinstance(raw, str):
        raise InputError("expected a list", field=field, accepted="a list of {labelSelector, topologyKey, namespaces}")
    terms = []
    for i, term in enumerate(raw):
        where = f"{field}[{i}]"
        if not isinstance(term, Mapping):
            raise InputError("expected a mapping", field=where, accepted="{labelSelector, topologyKey, namespaces}")
        key = term.get("topologyKey", HOSTNAME)
        if not isinstance(key, str):
            raise InputError("expected a string", field=f"{where}.topologyKey", accepted="a topology key")
        namespaces = term.get("namespaces")
        if namespaces is not None and (not isinstance(namespaces, list) or
                                       not all(isinstance(v, str) for v in namespaces)):
            raise InputError("expected a list of strings", field=f"{where}.namespaces", accepted='["batch", "ml"]')
        selector = (label_selector_of(term["labelSelector"], f"{where}.labelSelector") if "labelSelector" in term
                    else label_selector_of(term, where))
        terms.append(AntiAffinityTerm(selector, topology_key=key, namespaces=tuple(namespaces or ())))
    return tuple(terms)


@dataclass(frozen=True)
class SpreadConstraint:
    """A hard topology spread constraint for batch (``whenUnsatisfiable: DoNotSchedule``):
    among the domains of ``topology_key`` reachable by the pod's nodeSelector, the number of
    *batch* pods matching ``selector`` may differ by at most ``max_skew``. ``selector = None``
    means the pod's own labels (the usual manifest). Production pods are never counted, so
    batch never changes a production workload's skew."""

    max_skew: int
    topology_key: str = "zone"
    selector: LabelSelector | None = None

    def __post_init__(self) -> None:
        if self.max_skew < 1:
            raise InputError(f"maxSkew {self.max_skew} must be ≥ 1", field="topologySpreadConstraints.maxSkew")


@dataclass(frozen=True)
class Image:
    """A container image of a batch template: name and size in bytes (ImageLocality)."""

    name: str
    size_bytes: float
