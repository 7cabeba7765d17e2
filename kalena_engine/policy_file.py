"""The policy file (docs/design.md §10): the one exchange format for :class:`~kalena_engine.policy.Policy`
— console import/export, ``kalena replay --policy``, ``kalena evaluate`` input and output,
agents. This module is the only parser; one pure function maps each way:

* :func:`policy_from_document` — a parsed YAML/JSON mapping → :class:`PolicyDocument`;
* :func:`policy_to_document` — :class:`PolicyDocument` → a JSON/YAML-ready mapping;
* :func:`parse_policy_text` / :func:`dump_policy_text` — the same from and to text;
* :func:`policy_with_sections` — some ``spec`` sections on top of a policy (the agent's flags and
  the link's ``policy`` message), read by the same section readers.

Shape::

    apiVersion: kalena.naughtian.io/v1
    kind: Policy
    metadata: {name, version, created, source, calibration: {sweep, points, knee}}
    spec:
      estimator:  {margin_ratio, half_life_s, grace_s, stale_min_s, limit_ratio,
                   predictor, bucket_s, window_s, percentile, n_sigma, periodic_days,
                   periodic_harmonics, min_history_s, peak_margin_ratio, memory_margin_ratio,
                   members: [asymmetric, …],
                   under_cost_weight, over_cost_weight, cost_half_life_s, cost_horizon_s,
                   switch_margin_ratio}
      eviction:   {evict_threshold_ratio, acute_ratio, …, cooldown_s}
      placement:  {weight_balance, …, slack_buckets: {cpu: 50, …}, balance_dims: [cpu, ram]}
      escalation: {not_converged_s, evictions, window_s, cooldown_s}
      namespaces: {<namespace>: <running batch pod cap>}

Section keys are exactly the engine's field names, in their own units (``_s`` seconds,
``_ratio`` 0–1, ``_mcpu``, ``_bytes``, ``_pct`` 0–100). ``spec.namespaces`` is
``placement.namespace_batch_caps``. Omitted keys take the defaults; an unknown key, a wrong
type or a value out of range raises :class:`~kalena_engine.errors.PolicyError` naming the
file, line, dotted key and what is accepted — nothing is partly applied. Worked example::

    spec: {estimator: {margin_ratio: 1.3}}   → Policy().with_estimator(margin_ratio=1.3)
    spec: {estimator: {margin_ratio: 0.9}}   → PolicyError "spec.estimator.margin_ratio:
                                               0.9 is out of range (accepted: a number in [1, 10])"
"""

from __future__ import annotations

import datetime as _dt
import math
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from typing import Any

import yaml

from kalena_engine.errors import IRError, PolicyError
from kalena_engine.escalation import EscalationPolicy
from kalena_engine.kuberina.yamlio import _kind, parse_yaml
from kalena_engine.placement.policy import PlacementPolicy
from kalena_engine.policy import EstimatorPolicy, EvictionPolicy, Policy
from kalena_engine.predictors import MEMBERS, PREDICTORS
from kalena_engine.resources import DIMS

API_VERSION = "kalena.naughtian.io/v1"
KIND = "Policy"
SECTIONS = ("estimator", "eviction", "placement", "escalation", "namespaces")
CALIBRATION_POINT_KEYS = ("margin_ratio", "half_life_s", "reclaimed_fraction_cpu", "reclaimed_fraction_ram",
                          "batch_evictions_per_100_pod_hours", "production_contention_core_hours")
SWEEP_KEYS = ("margin_ratio", "half_life_s")
#: Optional keys of a calibration point: the predictor variant (text, ``asymmetric`` when
#: omitted), the load factor it was measured at (1), OOM kills and production cpu core-hours (the
#: contention share's denominator).
CALIBRATION_POINT_EXTRA = ("predictor", "load_factor", "oom_kills", "production_cpu_core_hours")
#: ``metadata.calibration.tolerance``: the operator's tolerance the shipped setting was chosen by.
TOLERANCE_KEYS = ("max_evictions_per_100_pod_hours", "max_contention_share")


@dataclass(frozen=True)
class Range:
    """What a field accepts: a number (``integer`` for whole ones) in ``[low, high]``
    (``open_low``: ``(low, high]``); ``optional``: null is accepted too."""

    low: float = -math.inf
    high: float = math.inf
    open_low: bool = False
    integer: bool = False
    optional: bool = False

    def describe(self) -> str:
        kind = "a whole number" if self.integer else "a number"
        left = "(" if self.open_low else "["
        low = "−∞" if self.low == -math.inf else f"{self.low:g}"
        high = "∞" if self.high == math.inf else f"{self.high:g}"
        text = f"{kind} in {left}{low}, {high}{']' if self.high != math.inf else ')'}"
        return text + (" or null" if self.optional else "")

    def admits(self, value: float) -> bool:
        if not math.isfinite(value):
            return False
        above = value > self.low if self.open_low else value >= self.low
        return above and value <= self.high


_POSITIVE = Range(0.0, open_low=True)
_NON_NEGATIVE = Range(0.0)
_RATIO = Range(0.0, 1.0, open_low=True)
_PCT = Range(0.0, 100.0)

#: Accepted values per section and field (every numeric field of the engine's policy).
RANGES: dict[str, dict[str, Range]] = {
    "estimator": {
        "margin_ratio": Range(1.0, 10.0), "half_life_s": _POSITIVE, "grace_s": _NON_NEGATIVE,
        "stale_min_s": _POSITIVE, "limit_ratio": Range(1.0, 100.0),
        "bucket_s": Range(1.0, 3600.0), "window_s": Range(60.0, 7 * 86400.0), "percentile": Range(0.0, 100.0),
        "n_sigma": Range(0.0, 10.0), "periodic_days": Range(1, 14, integer=True),
        "periodic_harmonics": Range(1, 12, integer=True), "min_history_s": Range(0.0, 14 * 86400.0),
        "peak_margin_ratio": Range(1.0, 10.0, optional=True), "memory_margin_ratio": Range(1.0, 10.0, optional=True),
        "under_cost_weight": _NON_NEGATIVE, "over_cost_weight": _NON_NEGATIVE, "cost_half_life_s": _POSITIVE,
        "cost_horizon_s": Range(1.0, 86400.0), "switch_margin_ratio": Range(0.0, 1.0, open_low=False),
    },
    "eviction": {
        "evict_threshold_ratio": _RATIO, "acute_ratio": _RATIO, "psi_some_avg10_pct": _PCT,
        "psi_full_avg10_pct": _PCT, "min_run_time_s": _NON_NEGATIVE, "min_batch_cpu_mcpu": _NON_NEGATIVE,
        "cfs_period_us": Range(1000, 1_000_000, integer=True), "starvation_window_s": _POSITIVE,
        "starvation_threshold_ratio": _RATIO, "cooldown_s": _NON_NEGATIVE,
    },
    "placement": {
        "weight_balance": _NON_NEGATIVE, "weight_colocation": _NON_NEGATIVE, "weight_image": _NON_NEGATIVE,
        "weight_volatility": _NON_NEGATIVE, "image_min_bytes": _NON_NEGATIVE, "image_max_bytes": _POSITIVE,
        "volatility_max_ratio": _RATIO, "volatility_half_life_s": _POSITIVE,
        "score_cache_entries": Range(1, integer=True), "percentage_of_nodes_to_score": _PCT,
        "adaptive_min_percentage": Range(0.0, 100.0, open_low=True),
        "min_feasible_nodes_to_find": Range(1, integer=True),
        "default_namespace_batch_cap": Range(0, integer=True, optional=True),
        "max_examples_per_reason": Range(0, integer=True),
    },
    "escalation": {
        "not_converged_s": _NON_NEGATIVE, "evictions": Range(1, integer=True), "window_s": _POSITIVE,
        "cooldown_s": _NON_NEGATIVE,
    },
}
#: Placement fields that are not plain numbers in the file.
_PLACEMENT_SPECIAL = ("balance_dims", "slack_buckets")
#: Estimator fields that are not plain numbers: the predictor's name and the members' names.
_ESTIMATOR_SPECIAL = ("predictor", "members")
_SECTION_TYPES = {"estimator": EstimatorPolicy, "eviction": EvictionPolicy, "placement": PlacementPolicy,
                  "escalation": EscalationPolicy}


@dataclass(frozen=True)
class CalibrationPoint:
    """One point of a calibration sweep (docs/design.md §10)."""

    margin_ratio: float
    half_life_s: float
    reclaimed_fraction_cpu: float
    reclaimed_fraction_ram: float
    batch_evictions_per_100_pod_hours: float
    production_contention_core_hours: float
    predictor: str = "asymmetric"
    load_factor: float = 1.0
    oom_kills: float = 0.0
    production_cpu_core_hours: float = 0.0


@dataclass(frozen=True)
class Calibration:
    """``sweep``: the values swept per parameter (``predictor``: the variants' labels);
    ``knee``: the knee's μ and h; ``shipped``: the setting the operator's tolerance picks
    (``predictor``, ``margin_ratio``, ``half_life_s``, ``qualified`` 1/0); ``tolerance``: that
    tolerance (:data:`TOLERANCE_KEYS`)."""

    sweep: tuple[tuple[str, tuple[float | str, ...]], ...] = ()
    points: tuple[CalibrationPoint, ...] = ()
    knee: tuple[tuple[str, float], ...] = ()
    shipped: tuple[tuple[str, float | str], ...] = ()
    tolerance: tuple[tuple[str, float], ...] = ()


@dataclass(frozen=True)
class PolicyMetadata:
    """``metadata`` of a policy file; ``version`` counts from 1, ``created`` is ISO 8601 text;
    ``cluster`` names the live cluster the policy (or calibration) is for ("" = any)."""

    name: str = "default"
    version: int = 1
    created: str = ""
    source: str = ""
    calibration: Calibration | None = None
    cluster: str = ""


@dataclass(frozen=True)
class PolicyDocument:
    """A policy with its metadata: what one policy file holds."""

    policy: Policy = field(default_factory=Policy)
    metadata: PolicyMetadata = field(default_factory=PolicyMetadata)


# -- reading -------------------------------------------------------------------------------------

@dataclass(frozen=True)
class _At:
    source: str
    path: str = ""
    line: int | None = None

    def key(self, container: Mapping[str, Any], key: Any) -> _At:
        line = getattr(container, "key_lines", {}).get(key, getattr(container, "line", None) or self.line)
        return _At(self.source, f"{self.path}.{key}" if self.path else str(key), line)

    def error(self, problem: str, accepted: str = "") -> PolicyError:
        return PolicyError(problem, source=self.source, line=self.line, field=self.path, accepted=accepted)

    def mapping(self, value: Any, allowed: tuple[str, ...] | None = None) -> Mapping[str, Any]:
        if not isinstance(value, Mapping):
            raise self.error(f"expected a mapping, got {_kind(value)}",
                             accepted=", ".join(allowed) if allowed else "")
        if allowed is not None:
            for key in value:
                if key not in allowed:
                    raise self.key(value, key).error(f"unknown key {key!r}", accepted=", ".join(allowed))
        return value

    def number(self, value: Any, accepted: Range) -> float | int | None:
        if value is None and accepted.optional:
            return None
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise self.error(f"expected {accepted.describe()}, got {_kind(value)}", accepted=accepted.describe())
        if accepted.integer and isinstance(value, float) and not value.is_integer():
            raise self.error(f"{value!r} is not a whole number", accepted=accepted.describe())
        if not accepted.admits(float(value)):
            raise self.error(f"{value!r} is out of range", accepted=accepted.describe())
        return int(value) if accepted.integer else float(value)

    def text(self, value: Any) -> str:
        if isinstance(value, _dt.date | _dt.datetime):
            return value.isoformat()
        if not isinstance(value, str):
            raise self.error(f"expected text, got {_kind(value)}")
        return value


def _section_keys(section: str) -> tuple[str, ...]:
    names = tuple(f.name for f in fields(_SECTION_TYPES[section]))
    if section == "placement":
        return tuple(n for n in names if n != "namespace_batch_caps")
    return names


def _read_section(section: str, data: Any, at: _At) -> dict[str, Any]:
    keys = _section_keys(section)
    body = at.mapping(data, keys)
    out: dict[str, Any] = {}
    for key, value in body.items():
        here = at.key(body, key)
        if section == "placement" and key == "balance_dims":
            out[key] = _read_dims(value, here)
        elif section == "placement" and key == "slack_buckets":
            out[key] = _read_buckets(value, here)
        elif section == "estimator" and key == "predictor":
            if value not in PREDICTORS:
                raise here.error(f"unknown predictor {value!r}", accepted=", ".join(PREDICTORS))
            out[key] = value
        elif section == "estimator" and key == "members":
            out[key] = _read_members(value, here)
        else:
            out[key] = here.number(value, RANGES[section][key])
    return out


def _read_dims(value: Any, at: _At) -> tuple[int, ...]:
    if not isinstance(value, list) or not value:
        raise at.error(f"expected a non-empty list of dimension names, got {_kind(value)}", accepted=", ".join(DIMS))
    dims = []
    for i, name in enumerate(value):
        if name not in DIMS:
            raise _At(at.source, f"{at.path}[{i}]", at.line).error(f"unknown dimension {name!r}", accepted=", ".join(DIMS))
        dims.append(DIMS.index(name))
    return tuple(dims)


def _read_members(value: Any, at: _At) -> tuple[str, ...]:
    if not isinstance(value, list) or not value:
        raise at.error(f"expected a non-empty list of predictor names, got {_kind(value)}", accepted=", ".join(MEMBERS))
    for i, name in enumerate(value):
        if name not in MEMBERS:
            raise _At(at.source, f"{at.path}[{i}]", at.line).error(f"unknown predictor {name!r}",
                                                                   accepted=", ".join(MEMBERS))
    return tuple(value)


def _read_buckets(value: Any, at: _At) -> tuple[float, ...]:
    body = at.mapping(value, DIMS)
    widths = list(PlacementPolicy().slack_buckets)
    for name, width in body.items():
        widths[DIMS.index(name)] = at.key(body, name).number(width, _POSITIVE)
    return tuple(widths)


def _read_namespaces(data: Any, at: _At) -> tuple[tuple[str, int], ...]:
    body = at.mapping(data)
    caps = []
    for name, cap in body.items():
        here = at.key(body, name)
        if not isinstance(name, str) or not name:
            raise here.error(f"a namespace name must be non-empty text, got {_kind(name)}")
        caps.append((name, int(here.number(cap, Range(0, integer=True)))))
    return tuple(sorted(caps))


def _read_metadata(data: Any, at: _At) -> PolicyMetadata:
    body = at.mapping(data, ("name", "version", "created", "source", "calibration", "cluster"))
    out: dict[str, Any] = {}
    for key in ("name", "created", "source", "cluster"):
        if key in body:
            out[key] = at.key(body, key).text(body[key])
    if "name" in out and not out["name"]:
        raise at.key(body, "name").error("a policy name must not be empty")
    if "version" in body:
        out["version"] = int(at.key(body, "version").number(body["version"], Range(1, integer=True)))
    if "calibration" in body:
        out["calibration"] = _read_calibration(body["calibration"], at.key(body, "calibration"))
    return PolicyMetadata(**out)


def _read_predictor_label(value: Any, at: _At) -> str:
    label = at.text(value)
    if label.split(":", 1)[0] not in PREDICTORS:
        raise at.error(f"unknown predictor {label!r}", accepted=", ".join(PREDICTORS))
    return label


def _read_calibration(data: Any, at: _At) -> Calibration:
    body = at.mapping(data, ("sweep", "points", "knee", "shipped", "tolerance"))
    sweep: list[tuple[str, tuple[float | str, ...]]] = []
    if "sweep" in body:
        here = at.key(body, "sweep")
        values = here.mapping(body["sweep"], (*SWEEP_KEYS, "predictor"))
        for name, listed in values.items():
            item = here.key(values, name)
            if not isinstance(listed, list) or not listed:
                raise item.error(f"expected a non-empty list of {'predictors' if name == 'predictor' else 'numbers'}, "
                                 f"got {_kind(listed)}")
            if name == "predictor":
                sweep.append((name, tuple(_read_predictor_label(v, item) for v in listed)))
            else:
                sweep.append((name, tuple(float(item.number(v, _POSITIVE)) for v in listed)))
    points = []
    if "points" in body:
        here = at.key(body, "points")
        if not isinstance(body["points"], list):
            raise here.error(f"expected a list of points, got {_kind(body['points'])}")
        for i, point in enumerate(body["points"]):
            p_at = _At(here.source, f"{here.path}[{i}]", (getattr(body["points"], "item_lines", None) or [here.line] * (i + 1))[i])
            row = p_at.mapping(point, (*CALIBRATION_POINT_KEYS, *CALIBRATION_POINT_EXTRA))
            missing = [k for k in CALIBRATION_POINT_KEYS if k not in row]
            if missing:
                raise p_at.error(f"missing {', '.join(missing)}", accepted=", ".join(CALIBRATION_POINT_KEYS))
            fields_ = {k: float(p_at.key(row, k).number(row[k], _NON_NEGATIVE))
                       for k in (*CALIBRATION_POINT_KEYS, *CALIBRATION_POINT_EXTRA[1:]) if k in row}
            if "predictor" in row:
                fields_["predictor"] = _read_predictor_label(row["predictor"], p_at.key(row, "predictor"))
            points.append(CalibrationPoint(**fields_))
    knee: list[tuple[str, float]] = []
    if "knee" in body:
        here = at.key(body, "knee")
        chosen = here.mapping(body["knee"], SWEEP_KEYS)
        knee = [(k, float(here.key(chosen, k).number(v, _POSITIVE))) for k, v in chosen.items()]
    shipped: list[tuple[str, float | str]] = []
    if "shipped" in body:
        here = at.key(body, "shipped")
        chosen = here.mapping(body["shipped"], (*SWEEP_KEYS, "predictor", "qualified"))
        for k, v in chosen.items():
            if k == "predictor":
                shipped.append((k, _read_predictor_label(v, here.key(chosen, k))))
            else:
                shipped.append((k, float(here.key(chosen, k).number(v, _NON_NEGATIVE if k == "qualified" else _POSITIVE))))
    tolerance: list[tuple[str, float]] = []
    if "tolerance" in body:
        here = at.key(body, "tolerance")
        given = here.mapping(body["tolerance"], TOLERANCE_KEYS)
        tolerance = [(k, float(here.key(given, k).number(v, _NON_NEGATIVE))) for k, v in given.items()]
    return Calibration(sweep=tuple(sweep), points=tuple(points), knee=tuple(knee), shipped=tuple(shipped),
                       tolerance=tuple(tolerance))


def _apply_spec(policy: Policy, spec: Mapping[str, Any], spec_at: _At) -> Policy:
    """``spec``'s sections read and applied on top of ``policy``, the cross-field rules checked."""
    sections: dict[str, dict[str, Any]] = {}
    for section in ("estimator", "eviction", "placement", "escalation"):
        if section in spec:
            sections[section] = _read_section(section, spec[section], spec_at.key(spec, section))
    if "namespaces" in spec:
        sections.setdefault("placement", {})["namespace_batch_caps"] = _read_namespaces(
            spec["namespaces"], spec_at.key(spec, "namespaces"))
    for section, changes in sections.items():
        try:
            policy = replace(policy, **{section: replace(getattr(policy, section), **changes)})
        except ValueError as exc:  # the dataclass's own cross-field checks
            raise spec_at.key(spec, section).error(str(exc)) from None
    eviction = policy.eviction
    if eviction.acute_ratio < eviction.evict_threshold_ratio:
        where = spec_at.key(spec, "eviction") if "eviction" in spec else spec_at
        raise where.error(f"acute_ratio {eviction.acute_ratio:g} is below evict_threshold_ratio "
                          f"{eviction.evict_threshold_ratio:g}", accepted="acute_ratio ≥ evict_threshold_ratio")
    return policy


def policy_with_sections(base: Policy, spec: Any, *, source: str = "<policy>",
                         sections: tuple[str, ...] = SECTIONS) -> Policy:
    """``base`` with the given ``spec`` sections (a policy file's ``spec`` body, any subset of
    keys) applied on top — read exactly as a file's ``spec`` is, so a link message or a flag is
    checked by the same ranges and units. Errors name the key without the ``spec.`` prefix
    (``estimator.margin_ratio``). ``sections`` narrows which sections may appear.

    Example: ``policy_with_sections(Policy(), {"estimator": {"margin_ratio": 1.3}})`` → the
    defaults with μ = 1.3; ``{"estimator": {"margin": 1.3}}`` raises
    ``<policy>: estimator.margin: unknown key 'margin' (accepted: margin_ratio, …)``.

    Raises:
        PolicyError: an unknown section or key, a wrong type, a value out of range, or a
            combination the engine refuses — naming ``source`` and the key.
    """
    at = _At(source)
    return _apply_spec(base, at.mapping(spec if spec is not None else {}, sections), at)


def policy_from_document(data: Any, *, source: str = "<policy>") -> PolicyDocument:
    """Map a parsed policy document to a :class:`PolicyDocument` (see module doc).

    Raises:
        PolicyError: not a ``kalena.naughtian.io/v1`` ``Policy``, an unknown key anywhere, a
            wrong type, a value out of range, or a combination the engine refuses (e.g.
            ``acute_ratio`` below ``evict_threshold_ratio``) — naming file, line and key.
    """
    at = _At(source)
    top = at.mapping(data, ("apiVersion", "kind", "metadata", "spec"))
    for key, wanted in (("apiVersion", API_VERSION), ("kind", KIND)):
        if top.get(key) != wanted:
            article = "an" if key[0] in "aeiou" else "a"
            problem = f"missing {key}" if key not in top else f"{top[key]!r} is not {article} {key} Kalena reads"
            raise (at.key(top, key) if key in top else _At(source, key, getattr(top, "line", None))).error(problem, accepted=wanted)
    metadata = _read_metadata(top["metadata"], at.key(top, "metadata")) if "metadata" in top else PolicyMetadata()
    spec_at = at.key(top, "spec")
    spec = spec_at.mapping(top.get("spec") or {}, SECTIONS) if "spec" in top else {}
    policy = _apply_spec(Policy(), spec, spec_at)
    return PolicyDocument(policy=policy, metadata=metadata)


def parse_policy_text(text: str, *, source: str = "<policy>") -> PolicyDocument:
    """Parse a YAML or JSON policy file's text (``source`` names it in errors).

    Raises:
        PolicyError: not YAML/JSON, empty, or anything :func:`policy_from_document` refuses.
    """
    try:
        data = parse_yaml(text, source=source)
    except IRError as exc:
        raise PolicyError(exc.problem, source=exc.source, line=exc.line) from None
    return policy_from_document(data, source=source)


# -- writing -------------------------------------------------------------------------------------

def _section_to_dict(section: str, value: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key in _section_keys(section):
        item = getattr(value, key)
        if key == "balance_dims":
            out[key] = [DIMS[d] for d in item]
        elif key == "slack_buckets":
            out[key] = {DIMS[d]: float(w) for d, w in enumerate(item)}
        elif key == "members":
            out[key] = list(item)
        else:
            out[key] = item
    return out


def policy_to_document(document: PolicyDocument) -> dict[str, Any]:
    """The file form of ``document``: every field written out, so reading it back gives the
    same :class:`PolicyDocument` (``policy_from_document(policy_to_document(d)) == d``)."""
    meta = document.metadata
    metadata: dict[str, Any] = {"name": meta.name, "version": meta.version}
    if meta.created:
        metadata["created"] = meta.created
    if meta.source:
        metadata["source"] = meta.source
    if meta.cluster:
        metadata["cluster"] = meta.cluster
    if meta.calibration is not None:
        cal = meta.calibration
        metadata["calibration"] = {
            "sweep": {k: list(v) for k, v in cal.sweep},
            "points": [{**{k: getattr(p, k) for k in CALIBRATION_POINT_KEYS},
                        **{k: getattr(p, k) for k in CALIBRATION_POINT_EXTRA
                           if getattr(p, k) != getattr(CalibrationPoint, k)}} for p in cal.points],
            "knee": dict(cal.knee),
        }
        if cal.shipped:
            metadata["calibration"]["shipped"] = dict(cal.shipped)
        if cal.tolerance:
            metadata["calibration"]["tolerance"] = dict(cal.tolerance)
    policy = document.policy
    spec = {section: _section_to_dict(section, getattr(policy, section))
            for section in ("estimator", "eviction", "placement", "escalation")}
    spec["namespaces"] = dict(policy.placement.namespace_batch_caps)
    return {"apiVersion": API_VERSION, "kind": KIND, "metadata": metadata, "spec": spec}


def dump_policy_text(document: PolicyDocument) -> str:
    """YAML text of :func:`policy_to_document` (JSON readers: ``json.dumps`` the mapping)."""
    return yaml.safe_dump(policy_to_document(document), sort_keys=False, allow_unicode=True)
