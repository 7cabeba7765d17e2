"""A policy draft from the console's form: text per field → a policy file mapping, checked by
the engine's parser (:mod:`kalena_engine.policy_file`, the only parser) one field at a time, so
every wrong field gets its own message naming it and the accepted range, then as a whole for
the cross-field rules. Nothing is stored here.

Form fields are named by the file's dotted keys (``estimator.margin_ratio``); namespace caps
are one ``name: cap`` per line in ``namespaces``. Fields the form does not show
(``placement.balance_dims``, ``placement.slack_buckets``) are carried over from the base policy;
the page posts the draft's own in a hidden ``carried`` field (:func:`carried_text`,
:func:`carried_base`), so an imported file's values reach Save.
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from kalena_engine.errors import PolicyError
from kalena_engine.policy_file import API_VERSION, KIND, RANGES, PolicyDocument, policy_from_document, policy_to_document

UNITS = {"_s": "seconds", "_ratio": "a ratio (1 = 100 %)", "_pct": "percent (0–100)", "_mcpu": "millicores",
         "_bytes": "bytes", "_us": "microseconds"}
_NUMBER = re.compile(r"^[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?$")


def unit_of(key: str) -> str:
    return next((text for suffix, text in UNITS.items() if key.endswith(suffix)), "a number")


@dataclass(frozen=True)
class FormField:
    name: str          # dotted key, e.g. estimator.margin_ratio
    section: str
    key: str
    value: str
    accepted: str
    unit: str
    error: str = ""


@dataclass
class Draft:
    """The outcome of reading a form: ``document`` (parsed) when every field is valid, else
    ``errors`` per dotted key (``""`` for whole-document errors)."""

    fields: list[FormField]
    namespaces: str
    errors: dict[str, str] = field(default_factory=dict)
    document: PolicyDocument | None = None
    mapping: dict[str, Any] | None = None


def _value_text(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, float) and value.is_integer() and abs(value) < 1e15:
        return str(int(value))
    return str(value)


def namespaces_text(caps: Mapping[str, int]) -> str:
    return "\n".join(f"{name}: {cap}" for name, cap in sorted(caps.items()))


def form_fields(document: PolicyDocument, errors: Mapping[str, str] | None = None,
                posted: Mapping[str, str] | None = None) -> list[FormField]:
    """One :class:`FormField` per numeric key of :data:`RANGES`, valued from ``posted`` when
    given (so a refused form shows what was typed) else from ``document``."""
    spec = policy_to_document(document)["spec"]
    out = []
    for section, keys in RANGES.items():
        for key, accepted in keys.items():
            name = f"{section}.{key}"
            value = posted[name] if posted is not None and name in posted else _value_text(spec[section][key])
            out.append(FormField(name=name, section=section, key=key, value=value, accepted=accepted.describe(),
                                 unit=unit_of(key), error=(errors or {}).get(name, "")))
    return out


def _number(text: str, key: str, integer: bool) -> int | float:
    cleaned = text.strip().replace("_", "")
    if not _NUMBER.match(cleaned):
        raise ValueError(f"{text.strip()!r} is not a number: the field is in {unit_of(key)}, write the number only")
    value = float(cleaned)
    return int(value) if integer and value.is_integer() else value


def _shell(spec: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": API_VERSION, "kind": KIND, "spec": spec}


def _message(exc: PolicyError) -> str:
    return exc.problem + (f" (accepted: {exc.accepted})" if exc.accepted else "")


#: placement keys of the policy file that the form does not show (carried in ``carried``)
CARRIED = ("balance_dims", "slack_buckets")
#: estimator keys of the policy file that the form does not show (text, not numbers): carried
#: under ``estimator`` in the same field, so a calibration point's predictor reaches Save.
CARRIED_ESTIMATOR = ("predictor", "members")


def carried_text(document: PolicyDocument) -> str:
    """The page's hidden ``carried`` field: the :data:`CARRIED` keys of ``document`` as JSON,
    e.g. ``{"balance_dims": ["cpu", "ram"], "slack_buckets": {"cpu": 1000.0, …}}``."""
    spec = policy_to_document(document)["spec"]
    carried: dict[str, Any] = {key: spec["placement"][key] for key in CARRIED}
    carried["estimator"] = {key: spec["estimator"][key] for key in CARRIED_ESTIMATOR}
    return json.dumps(carried, sort_keys=True)


def carried_base(text: str, *, base: PolicyDocument) -> PolicyDocument:
    """``base`` with the posted ``carried`` keys (:func:`carried_text`; empty → ``base``),
    checked by the engine's parser.

    Raises:
        PolicyError: not a JSON object of :data:`CARRIED` keys, or a value the parser refuses
            (the message names the key, e.g. ``spec.placement.slack_buckets.cpu``).
    """
    if not text.strip():
        return base
    try:
        carried = json.loads(text)
    except ValueError:
        carried = None
    estimator = carried.pop("estimator", {}) if isinstance(carried, dict) else None
    if (not isinstance(carried, dict) or set(carried) - set(CARRIED) or not isinstance(estimator, dict)
            or set(estimator) - set(CARRIED_ESTIMATOR)):
        names = ", ".join([*CARRIED, "estimator"])
        raise PolicyError(f"the carried keys are not a JSON object of {names}", source="draft",
                          field="carried", accepted=f"a JSON object with keys among {names} "
                                                    f"(estimator: {', '.join(CARRIED_ESTIMATOR)})")
    mapping = policy_to_document(base)
    mapping["spec"]["placement"].update(carried)
    mapping["spec"]["estimator"].update(estimator)
    return policy_from_document(mapping, source="draft")


def draft_read(posted: Mapping[str, str], *, base: PolicyDocument, name: str = "draft") -> Draft:
    """Read a posted form against ``base`` (the current version). Never raises on bad input:
    every problem lands in ``Draft.errors`` under its field."""
    spec = copy.deepcopy(policy_to_document(base)["spec"])
    errors: dict[str, str] = {}
    for section, keys in RANGES.items():
        for key, accepted in keys.items():
            dotted = f"{section}.{key}"
            if dotted not in posted:
                continue
            text = str(posted[dotted])
            if not text.strip():
                if accepted.optional:
                    spec[section][key] = None
                    continue
                errors[dotted] = f"a value is required (accepted: {accepted.describe()})"
                continue
            try:
                value = _number(text, key, accepted.integer)
                policy_from_document(_shell({section: {key: value}}), source="draft")
            except ValueError as exc:
                errors[dotted] = str(exc)
                continue
            except PolicyError as exc:
                if exc.field == f"spec.{dotted}":
                    errors[dotted] = _message(exc)
                    continue
                # a rule across fields (acute_ratio ≥ evict_threshold_ratio) tested against the
                # other field's default: the whole draft is judged below, with its own values
            spec[section][key] = value
    namespaces = str(posted.get("namespaces", namespaces_text(spec["namespaces"])))
    caps: dict[str, Any] = {}
    for n, line in enumerate(namespaces.splitlines(), start=1):
        if not line.strip():
            continue
        ns, sep, cap = line.partition(":")
        if not sep or not ns.strip():
            errors["namespaces"] = f"line {n}: {line.strip()!r} is not 'namespace: cap'"
            break
        if ns.strip() in caps:
            errors["namespaces"] = f"line {n}: namespace {ns.strip()!r} is capped twice (accepted: one line per namespace)"
            break
        try:
            caps[ns.strip()] = _number(cap, "cap", True)
        except ValueError:
            errors["namespaces"] = f"line {n}: {cap.strip()!r} is not a whole number of running batch pods"
            break
    else:
        try:
            policy_from_document(_shell({"namespaces": caps}), source="draft")
            spec["namespaces"] = caps
        except PolicyError as exc:
            errors["namespaces"] = f"{exc.field}: {_message(exc)}"
    draft = Draft(fields=form_fields(base, errors, posted), namespaces=namespaces, errors=errors)
    if errors:
        return draft
    mapping = {**_shell(spec), "metadata": {"name": name}}
    try:
        draft.document = policy_from_document(mapping, source="draft")
        draft.mapping = mapping
    except PolicyError as exc:
        key = exc.field.removeprefix("spec.")
        if key == "eviction" and "acute_ratio" in exc.problem:
            key = "eviction.acute_ratio"
        draft.errors[key if key in posted else ""] = _message(exc)
        draft.fields = form_fields(base, draft.errors, posted)
    return draft
