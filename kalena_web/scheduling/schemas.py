"""The batch submit body (``POST /api/clusters/{cluster}/batch``) as a typed schema: every rule
the server applies to a submission that JSON Schema can state is in the OpenAPI document, and
the server refuses exactly what the schema refuses (422 naming the field).

Resource blocks are Kuberina quantities (:mod:`kalena_engine.kuberina.quantity`), one pattern
per dimension family, at most 7 integer digits and 18 decimals (or a JSON number below
10,000,000 of the IR unit) so that no spelling overflows or rounds to zero:

===========  =====================================  ====================================
dimension    string                                 number
===========  =====================================  ====================================
cpu          ``"2"``, ``"0.5"``, ``"250m"``         cores, 0 ≤ x < 1e7
ram/storage  ``"2"``, ``"512Mi"``, ``"1.5Gi"``      GiB (suffix Ki Mi Gi Ti)
gpu          ``"2"``                                whole devices, 0 ≤ n < 1e7
disk/network ``"500M"``, ``"1G"``, ``"1000k"``      MB/s (suffix k M G), nested read/write, in/out
===========  =====================================  ====================================

A request must ask for some cpu or ram: ``anyOf`` a positive ``cpu`` or a positive ``ram``
(positive: a number > 0, or a string with a non-zero digit among its integer digits or its
first nine decimals — ``"0.000000001"`` is, ``"0.0000000001"`` is not). Labels, node selectors and
selector values follow Kubernetes' syntax (``[prefix/]name``, names and values at most 63
characters). Two rules are not JSON Schema's to state and are not refusals: a limit below its
request on some dimension is that request (the limit is the most the pod may use, never less
than it reserves), and a request larger than every node of the cluster is queued and stays
pending with its why-pending record, as kube-scheduler keeps an unschedulable pod.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal, Union

from ninja import Field, Schema
from pydantic import BeforeValidator, ConfigDict, PlainValidator, StringConstraints, WithJsonSchema, model_validator

from kalena_engine.kuberina.fields import FLAT_HINTS
from kalena_web.api.params import TEXT
from kalena_web.scheduling import services

# -- quantities -----------------------------------------------------------------------------------

_INT = r"0*[0-9]{1,7}"
_NUMBER = rf"(?:{_INT}(?:\.[0-9]{{0,18}})?|\.[0-9]{{1,18}})"
#: a number with a non-zero digit (a subset of _NUMBER): 1–7 significant integer digits, or a
#: non-zero digit among the first nine decimals
_POSITIVE = r"(?:0*[1-9][0-9]{0,6}(?:\.[0-9]{0,18})?|0*\.0{0,8}[1-9][0-9]{0,9})"
QUANTITY_MAX = 10_000_000  # exclusive, in the dimension's IR unit (cores, GiB, devices, MB/s)
_SUFFIX = {"cpu": "m?", "binary": "(?:Ki|Mi|Gi|Ti)?", "gpu": "", "decimal": "[kMG]?"}


def _not_bool(value: object) -> object:
    if isinstance(value, bool):
        raise ValueError("a boolean is not a number")
    return value


def whole(**bounds: int):
    """A JSON integer within ``bounds`` (``ge``, ``lt``, …): ``2`` or ``2.0``, as JSON Schema counts
    them, never ``true`` (the bounds come first, so that the schema states them)."""
    return Annotated[int, Field(**bounds), BeforeValidator(_not_bool)]


def _no_default(schema: dict[str, Any]) -> None:
    schema.pop("default", None)  # optional, never null: an omitted dimension is 0


_ACCEPTED = {
    "cpu": "cores below 10,000,000, or millicores: 0.5, \"250m\"",
    "binary": "GiB below 10,000,000, or a binary suffix Ki Mi Gi Ti: 2, \"512Mi\"",
    "gpu": "whole devices below 10,000,000: 1, \"2\"",
    "decimal": "MB/s below 10,000,000, or a decimal suffix k M G: 500, \"1G\"",
}


def _quantity(family: str):
    """One dimension's quantity: a JSON number below :data:`QUANTITY_MAX` (a whole one for gpu)
    or a string of at most 7 integer and 18 decimal digits with the family's suffix; a refusal
    says which spellings are accepted."""
    whole_only = family == "gpu"
    pattern = rf"^{_INT}$" if whole_only else rf"^{_NUMBER}{_SUFFIX[family]}$"
    spelled = re.compile(pattern)
    number: dict[str, Any] = {"type": "integer" if whole_only else "number", "minimum": 0,
                              "exclusiveMaximum": QUANTITY_MAX}

    def check(value: object) -> object:
        if isinstance(value, str) and spelled.fullmatch(value):
            return value
        if isinstance(value, int | float) and not isinstance(value, bool) and 0 <= value < QUANTITY_MAX and \
                (not whole_only or float(value).is_integer()):
            return value
        raise ValueError(f"{str(value)[:40]!r} is not a quantity (accepted: {_ACCEPTED[family]})")

    return Annotated[Any, PlainValidator(check),
                     WithJsonSchema({"anyOf": [number, {"type": "string", "pattern": pattern}]})]


Cpu = _quantity("cpu")
Ram = _quantity("binary")
Gpu = _quantity("gpu")
Decimal = _quantity("decimal")
_POSITIVE_PATTERNS = {"cpu": re.compile(rf"^{_POSITIVE}m?$"), "ram": re.compile(rf"^{_POSITIVE}(?:Ki|Mi|Gi|Ti)?$")}


def _optional(description: str):
    return Field(None, description=description, json_schema_extra=_no_default)


def _known_keys(cls: type[Schema], data: object, hints: dict[str, str] | None = None) -> object:
    """Refuse a key the closed object does not have, naming it and the keys accepted (and the
    Kuberina hint for a flat or Kubernetes spelling: ``memory`` → ``ram``)."""
    if isinstance(data, dict):
        known = {f.alias or name for name, f in cls.model_fields.items()}
        for key in data:
            if key not in known:
                hint = (hints or {}).get(key)
                raise ValueError(f"unknown key {str(key)[:40]!r} ({hint or 'accepted: ' + ', '.join(sorted(known))})")
    return data


class _Closed(Schema):
    """An object with a fixed set of keys (``additionalProperties: false``)."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    @model_validator(mode="before")
    @classmethod
    def _only_known_keys(cls, data: object) -> object:
        return _known_keys(cls, data)


class DiskIn(_Closed):
    read: Decimal = _optional("MB/s; decimal suffix k M G")
    write: Decimal = _optional("MB/s; decimal suffix k M G")


class NetworkIn(_Closed):
    in_: Decimal = Field(None, alias="in", description="MB/s; decimal suffix k M G", json_schema_extra=_no_default)
    out: Decimal = _optional("MB/s; decimal suffix k M G")


class LimitIn(_Closed):
    """A Kuberina resource block (IR units). An omitted dimension is 0 in a request and the
    request in a limit."""

    cpu: Cpu = _optional("cores: 0.5, or millicores: 250m")
    ram: Ram = _optional("GiB: 2, or a binary suffix: 512Mi, 1.5Gi")
    gpu: Gpu = _optional("whole devices")
    storage: Ram = _optional("GiB, or a binary suffix")
    disk: DiskIn = _optional("disk bandwidth, MB/s")
    network: NetworkIn = _optional("network bandwidth, MB/s")

    @model_validator(mode="before")
    @classmethod
    def _only_known_keys(cls, data: object) -> object:
        return _known_keys(cls, data, FLAT_HINTS)

    def block(self) -> dict[str, Any]:
        """The block as sent (Kuberina spellings kept), without omitted dimensions."""
        return self.model_dump(exclude_unset=True, by_alias=True)


def _positive(value: object, dim: str) -> bool:
    if isinstance(value, str):
        return bool(_POSITIVE_PATTERNS[dim].fullmatch(value))
    return isinstance(value, int | float) and value > 0


def _cpu_or_ram(schema: dict[str, Any]) -> None:
    schema["anyOf"] = [
        {"required": [dim], "properties": {dim: {"anyOf": [
            {"type": "number", "exclusiveMinimum": 0, "exclusiveMaximum": QUANTITY_MAX},
            {"type": "string", "pattern": _POSITIVE_PATTERNS[dim].pattern}]}}}
        for dim in ("cpu", "ram")]


class RequestIn(LimitIn):
    """A Kuberina resource block asking for some cpu or ram: ``anyOf`` a positive ``cpu`` or a
    positive ``ram``."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True, json_schema_extra=_cpu_or_ram)

    @model_validator(mode="after")
    def _some_cpu_or_ram(self) -> RequestIn:
        if not (_positive(self.cpu, "cpu") or _positive(self.ram, "ram")):
            raise ValueError("a batch pod must request some cpu or ram (accepted: cpu > 0 or ram > 0)")
        return self


# -- labels and constraints (Kubernetes' syntax) ------------------------------------------------

_DNS_LABEL = r"[a-z0-9](?:[-a-z0-9]{0,61}[a-z0-9])?"
_NAME = r"[A-Za-z0-9](?:[-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?"
LABEL_KEY = rf"^(?:{_DNS_LABEL}(?:\.{_DNS_LABEL})*/)?{_NAME}$"
LABEL_VALUE = rf"^(?:{_NAME})?$"
LabelKey = Annotated[str, StringConstraints(pattern=LABEL_KEY, max_length=services.LABEL_KEY_MAX)]
LabelValue = Annotated[str, StringConstraints(pattern=LABEL_VALUE, max_length=63)]
Namespace = Annotated[str, StringConstraints(pattern=rf"^{_DNS_LABEL}$")]
Text = Annotated[str, StringConstraints(pattern=TEXT, max_length=253)]


def label_map(description: str, *, max_properties: int = services.LABELS_MAX):
    """``dict[LabelKey, LabelValue]`` stated as JSON Schema says it (``propertyNames`` and
    ``additionalProperties``; pydantic would write ``patternProperties``, which lets any other
    key through)."""

    def schema(s: dict[str, Any]) -> None:
        s.pop("patternProperties", None)
        s["propertyNames"] = {"type": "string", "pattern": LABEL_KEY, "maxLength": services.LABEL_KEY_MAX}
        s["additionalProperties"] = {"type": "string", "pattern": LABEL_VALUE, "maxLength": 63}

    return Field({}, max_length=max_properties, description=description, json_schema_extra=schema)


class SetRequirementIn(_Closed):
    key: LabelKey
    operator: Literal["In", "NotIn"]
    values: list[LabelValue] = Field(min_length=1)


class ExistsRequirementIn(_Closed):
    key: LabelKey
    operator: Literal["Exists", "DoesNotExist"]
    values: list[LabelValue] = Field([], max_length=0, description="none: Exists and DoesNotExist take no values")


class CompareRequirementIn(_Closed):
    key: LabelKey
    operator: Literal["Gt", "Lt"]
    values: list[Annotated[str, StringConstraints(pattern=r"^[+-]?[0-9]{1,18}$")]] = Field(
        min_length=1, max_length=1, description="one integer, compared with the node's label read as one")


class FieldRequirementIn(_Closed):
    key: Literal["metadata.name"]
    operator: Literal["In", "NotIn"]
    values: list[Text] = Field(min_length=1)


SelectorRequirement = Annotated[Union[SetRequirementIn, ExistsRequirementIn], Field(discriminator="operator")]  # noqa: UP007
NodeRequirementIn = Annotated[Union[SetRequirementIn, ExistsRequirementIn, CompareRequirementIn],  # noqa: UP007
                              Field(discriminator="operator")]


class LabelSelectorIn(_Closed):
    """Kubernetes' ``LabelSelector``; empty selects every pod."""

    matchLabels: dict[LabelKey, LabelValue] = label_map("label → value; every pair must hold", max_properties=64)
    matchExpressions: list[SelectorRequirement] = []


class NodeSelectorTermIn(_Closed):
    """One of a required node affinity's terms (ORed); its requirements are ANDed."""

    matchExpressions: list[NodeRequirementIn] = []
    matchFields: list[FieldRequirementIn] = []


class TolerationExistsIn(_Closed):
    key: Annotated[str, StringConstraints(pattern=rf"^(?:{LABEL_KEY[1:-1]})?$", max_length=services.LABEL_KEY_MAX)] = \
        Field("", description="empty: every taint key")
    operator: Literal["Exists"] = "Exists"
    effect: Literal["", "NoSchedule", "PreferNoSchedule", "NoExecute"] = Field("", description="empty: every effect")


class TolerationEqualIn(_Closed):
    key: LabelKey
    operator: Literal["Equal"]
    value: LabelValue = ""
    effect: Literal["", "NoSchedule", "PreferNoSchedule", "NoExecute"] = Field("", description="empty: every effect")


class AntiAffinityTermIn(_Closed):
    labelSelector: LabelSelectorIn = _optional("the pods to keep away from; omitted: every pod")
    topologyKey: LabelKey = Field(None, description="omitted: kubernetes.io/hostname", json_schema_extra=_no_default)
    namespaces: list[Namespace] = Field([], description="empty: every namespace")


class SpreadIn(_Closed):
    maxSkew: whole(ge=1, le=2**31 - 1) = 1
    topologyKey: LabelKey = Field(None, description="omitted: zone", json_schema_extra=_no_default)
    labelSelector: LabelSelectorIn = _optional("the pods counted; omitted: the pod's own labels")


class ConstraintsIn(_Closed):
    """Where the pod may go (the IR's closed mapping of constraints)."""

    node_selector: dict[LabelKey, LabelValue] = label_map("node label → value; every pair must hold")
    node_affinity: list[NodeSelectorTermIn] = Field([], description="required node affinity: terms, ORed")
    tolerations: list[Union[LabelKey, TolerationExistsIn, TolerationEqualIn]] = Field(  # noqa: UP007
        [], description="a taint key (operator Exists), or {key, operator, value, effect}")
    anti_affinity_terms: list[Union[AntiAffinityTermIn, LabelSelectorIn]] = Field(  # noqa: UP007
        [], description="required pod anti-affinity: {labelSelector, topologyKey, namespaces}, or the selector alone")
    anti_affinity: list[Text] = Field([], description="Kuberina workload names to keep away from")
    spread: list[SpreadIn] = Field([], description="hard topology spread: {maxSkew, topologyKey, labelSelector}")

    def mapping(self) -> dict[str, Any]:
        """The constraints as sent, without omitted keys (stored as the IR's constraints)."""
        return self.model_dump(exclude_unset=True)


# -- the body -------------------------------------------------------------------------------------


class BatchIn(Schema):
    name: str = Field(max_length=services.NAME_MAX, pattern=f"^{services.POD_NAME.pattern}$",
                      description="namespace/pod (Kubernetes DNS-1123 names)")
    owner: str = Field("", max_length=200, pattern=TEXT)
    request: RequestIn = Field(description='a Kuberina resource block in IR units: {"cpu": 0.5, "ram": "2Gi"}; '
                                           "some cpu or ram")
    limit: LimitIn | None = Field(None, description="the most the pod may use; omitted, or a dimension omitted or "
                                                    "below its request: the request")
    priority: whole(ge=0, le=services.PRIORITY_MAX) = 0
    labels: dict[LabelKey, LabelValue] = label_map("Kubernetes labels: [prefix/]name → value")
    constraints: ConstraintsIn = ConstraintsIn()
    image: str = Field("", max_length=300, pattern=TEXT)
    command: list[Text] = []
    gang: str = Field("", max_length=200, pattern=TEXT)
    min_member: whole(ge=1, le=services.MIN_MEMBER_MAX) | None = None
