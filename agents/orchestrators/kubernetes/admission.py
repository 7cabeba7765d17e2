"""The mutating admission webhook's decisions (docs/design.md §14, §4): AdmissionReview v1 in, AdmissionReview
v1 out. Pure — no I/O, no clock; the Django view over TLS is a thin shell around :func:`review`.

Pods (``CREATE``): a batch pod — label ``kalena.naughtian.io/tier: batch``, or (inference on)
no tier label and a controlling owner of kind ``Job`` (CronJob pods are owned by their Job) — is
converted:

* every container's (and init container's) cpu/memory requests and limits are removed and
  replaced by ``kalena.naughtian.io/batch-cpu`` (mcpu) and ``kalena.naughtian.io/batch-memory``
  (bytes), request = limit = the original *request* (Kubernetes requires equality for extended
  resources; a container with only a limit has request = limit, Kubernetes' defaulting rule);
* the originals go into the ``kalena.naughtian.io/resources`` annotation
  (:mod:`~agents.orchestrators.kubernetes.batch_resources`), the agent enforces them;
* ``spec.schedulerName: kalena`` (left alone in extender mode), and an inferred pod gets the
  tier label so every later reader agrees it is batch.

The pod is then BestEffort QoS to the kubelet (no cpu/memory requests or limits): Kalena's
agent, not the kubelet, writes its cgroups. A pod already converted (the annotation is there and
no cpu/memory is left) is allowed unchanged, so a reinvocation changes nothing.

Jobs (``CREATE``, tier batch): a ``podFailurePolicy`` rule ``{action: Ignore, onPodConditions:
[{type: DisruptionTarget}]}`` is put first, so Kalena's evictions do not consume
``backoffLimit``; Kubernetes accepts a podFailurePolicy only with ``restartPolicy: Never``, so
a Job with another restart policy is allowed unchanged with a warning saying so.

Everything else (other operations, other kinds, service-tier pods) is allowed without a patch.
A review that cannot be read, or a pod that cannot be converted (a quantity that is not one, a
container that is not an object) is denied (HTTP-level 200, ``allowed: false``, status 400)
with a message naming the field.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from agents.discovery.labels import TIER
from agents.orchestrators.kubernetes.batch_resources import (
    BATCH_CPU, BATCH_MEMORY, RESOURCES_ANNOTATION, SCHEDULER_NAME, PodResources, QuantityError, cpu_mcpu, effective,
    memory_bytes,
)

API_VERSION = "admission.k8s.io/v1"
#: The rule put first in a batch Job's podFailurePolicy.
IGNORE_DISRUPTION = {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]}
#: Largest review body read (the API server's request limit is 3 MiB; objects ≤ 1.5 MiB).
MAX_BODY_BYTES = 6 * 2**20


@dataclass(frozen=True)
class AdmissionConfig:
    """Operator switches: ``infer_jobs`` (docs/design.md §4: Job/CronJob pods without a tier label are
    batch), ``extender_mode`` (kube-scheduler keeps batch: leave ``schedulerName`` alone),
    ``scheduler_name`` (``kalena``)."""

    infer_jobs: bool = False
    extender_mode: bool = False
    scheduler_name: str = SCHEDULER_NAME


class Denied(Exception):
    """The review or its object cannot be converted; ``field`` names where (JSON path)."""

    def __init__(self, message: str, *, field: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field


def review(body: bytes | str | Mapping[str, Any], config: AdmissionConfig = AdmissionConfig()) -> dict[str, Any]:
    """Answer one AdmissionReview (raw body or parsed); never raises (an internal error allows the
    object unchanged with a warning, as ``failurePolicy: Ignore`` would).

    Returns:
        The response AdmissionReview: ``response.uid`` echoes the request's, ``allowed``,
        and for a conversion ``patchType: JSONPatch`` with the base64 JSON Patch (RFC 6902);
        a denial carries ``status: {code: 400, reason: BadRequest, message}``.
    """
    uid = ""
    try:
        doc = _parse(body)
        request = _mapping(doc.get("request"), "request")
        uid = request.get("uid")
        if not isinstance(uid, str) or not uid:
            uid = ""
            raise Denied("missing or not a string", field="request.uid")
        patch, warnings = decide(request, config)
    except Denied as exc:
        return _answer(uid, allowed=False, message=f"kalena admission: {exc}")
    except Exception as exc:  # noqa: BLE001 - a bug here must not block pod creation
        # what failurePolicy: Ignore would do with a crash, but answered: the pod as it was
        return _answer(uid, allowed=True, warnings=[f"kalena admission: internal error ({type(exc).__name__}); "
                                                    "the object was left unchanged"])
    return _answer(uid, allowed=True, patch=patch, warnings=warnings)


def decide(request: Mapping[str, Any], config: AdmissionConfig) -> tuple[list[dict[str, Any]], list[str]]:
    """The JSON Patch and warnings for one ``AdmissionRequest``.

    Raises:
        Denied: naming the field that cannot be read or converted.
    """
    operation = request.get("operation")
    if not isinstance(operation, str):
        raise Denied("missing or not a string", field="request.operation")
    kind = _mapping(request.get("kind"), "request.kind")
    if operation != "CREATE":
        return [], []
    obj = _mapping(request.get("object"), "request.object")
    meta = _mapping(obj.get("metadata") or {}, "request.object.metadata")
    labels = _string_map(meta.get("labels"), "request.object.metadata.labels")
    if kind.get("kind") == "Pod" and kind.get("group", "") == "":
        return _pod(obj, meta, labels, config)
    if kind.get("kind") == "Job" and kind.get("group") == "batch":
        return _job(obj, labels)
    return [], []


# -- pods ----------------------------------------------------------------------------------------


def is_batch(labels: Mapping[str, str], meta: Mapping[str, Any], config: AdmissionConfig) -> tuple[bool, bool]:
    """``(batch, inferred)``: docs/design.md §4 — the tier label, else Job ownership when inference is on."""
    tier = labels.get(TIER)
    if tier is not None:
        return tier.strip().lower() == "batch", False
    owners = meta.get("ownerReferences") or []
    job_owned = isinstance(owners, list) and any(
        isinstance(o, Mapping) and o.get("kind") == "Job" and o.get("controller") is True for o in owners)
    return bool(config.infer_jobs and job_owned), bool(config.infer_jobs and job_owned)


def _pod(obj: Mapping[str, Any], meta: Mapping[str, Any], labels: Mapping[str, str],
         config: AdmissionConfig) -> tuple[list[dict[str, Any]], list[str]]:
    batch, inferred = is_batch(labels, meta, config)
    if not batch:
        return [], []
    spec = _mapping(obj.get("spec"), "request.object.spec")
    annotations = _string_map(meta.get("annotations"), "request.object.metadata.annotations")
    patch: list[dict[str, Any]] = []
    original: dict[str, dict[str, Any]] = {"containers": {}, "initContainers": {}}
    values: dict[str, list[dict[str, int | None]]] = {"containers": [], "initContainers": []}
    for group in ("containers", "initContainers"):
        containers = spec.get(group)
        if group == "containers" and (not isinstance(containers, list) or not containers):
            raise Denied("a pod needs at least one container", field="request.object.spec.containers")
        if containers is None:
            continue
        if not isinstance(containers, list):
            raise Denied("expected a list", field=f"request.object.spec.{group}")
        for i, container in enumerate(containers):
            where = f"request.object.spec.{group}[{i}]"
            container = _mapping(container, where)
            new, kept, converted = _convert(container, where)
            name = container.get("name")
            original[group][name if isinstance(name, str) and name else str(i)] = kept
            values[group].append(converted)
            patch.append({"op": "add", "path": f"/spec/{group}/{i}/resources", "value": new})
    if RESOURCES_ANNOTATION in annotations and not _has_cpu_memory(spec):
        return [], []  # already converted: a reinvocation changes nothing
    pod = PodResources(
        request_mcpu=effective(values["containers"], values["initContainers"], "request_mcpu") or 0,
        request_bytes=effective(values["containers"], values["initContainers"], "request_bytes") or 0,
        limit_mcpu=effective(values["containers"], values["initContainers"], "limit_mcpu"),
        limit_bytes=effective(values["containers"], values["initContainers"], "limit_bytes"),
    )
    record = json.dumps({"version": 1, **original, "pod": pod.to_json()}, sort_keys=True, separators=(",", ":"))
    patch.append(_put_key(meta, "annotations", RESOURCES_ANNOTATION, record))
    if inferred:
        patch.append(_put_key(meta, "labels", TIER, "batch"))
    if not config.extender_mode:
        patch.append({"op": "add", "path": "/spec/schedulerName", "value": config.scheduler_name})
    return patch, []


def _convert(container: Mapping[str, Any], where: str) -> tuple[dict[str, Any], dict[str, Any], dict[str, int | None]]:
    """``(new resources, original cpu/memory, internal values)`` of one container."""
    # JSON null is absent (the API server defaults these to {})
    resources = _mapping(container.get("resources") or {}, f"{where}.resources")
    requests = dict(_mapping(resources.get("requests") or {}, f"{where}.resources.requests"))
    limits = dict(_mapping(resources.get("limits") or {}, f"{where}.resources.limits"))
    out: dict[str, int | None] = {}
    kept: dict[str, dict[str, str]] = {"requests": {}, "limits": {}}
    for name, parse, key in (("cpu", cpu_mcpu, "mcpu"), ("memory", memory_bytes, "bytes")):
        request_raw, limit_raw = requests.pop(name, None), limits.pop(name, None)
        try:
            limit = None if limit_raw is None else parse(limit_raw, field=f"{where}.resources.limits.{name}")
            request = limit if request_raw is None else parse(request_raw, field=f"{where}.resources.requests.{name}")
        except QuantityError as exc:
            raise Denied(str(exc).split(": ", 1)[1], field=exc.field) from None
        if limit is not None and request is not None and request > limit:
            raise Denied(f"request {request_raw} exceeds limit {limit_raw}", field=f"{where}.resources.requests.{name}")
        if request_raw is not None:
            kept["requests"][name] = str(request_raw)
        if limit_raw is not None:
            kept["limits"][name] = str(limit_raw)
        out[f"request_{key}"] = request or 0
        out[f"limit_{key}"] = limit
    for name, key in ((BATCH_CPU, "request_mcpu"), (BATCH_MEMORY, "request_bytes")):
        if out[key]:
            requests[name] = limits[name] = str(out[key])
        else:
            requests.pop(name, None)
            limits.pop(name, None)
    new = {k: v for k, v in resources.items() if k not in ("requests", "limits")}
    if requests:
        new["requests"] = requests
    if limits:
        new["limits"] = limits
    return new, kept, out


def _has_cpu_memory(spec: Mapping[str, Any]) -> bool:
    for group in ("containers", "initContainers"):
        for container in spec.get(group) or []:
            resources = container.get("resources") or {}
            for part in ("requests", "limits"):
                if {"cpu", "memory"} & set((resources.get(part) or {})):
                    return True
    return False


# -- jobs ----------------------------------------------------------------------------------------


def _job(obj: Mapping[str, Any], labels: Mapping[str, str]) -> tuple[list[dict[str, Any]], list[str]]:
    if labels.get(TIER, "").strip().lower() != "batch":
        return [], []
    spec = _mapping(obj.get("spec"), "request.object.spec")
    template = _mapping(spec.get("template", {}), "request.object.spec.template")
    pod_spec = _mapping(template.get("spec", {}), "request.object.spec.template.spec")
    restart = pod_spec.get("restartPolicy")
    if restart != "Never":
        return [], [f"kalena: Job restartPolicy is {restart!r}, not 'Never': no podFailurePolicy rule was added, "
                    "so Kalena's evictions count against backoffLimit"]
    policy = spec.get("podFailurePolicy")
    if policy is None:
        return [{"op": "add", "path": "/spec/podFailurePolicy", "value": {"rules": [IGNORE_DISRUPTION]}}], []
    policy = _mapping(policy, "request.object.spec.podFailurePolicy")
    rules = policy.get("rules")
    if not isinstance(rules, list):
        raise Denied("expected a list", field="request.object.spec.podFailurePolicy.rules")
    if any(isinstance(r, Mapping) and r.get("action") == "Ignore"
           and any(isinstance(c, Mapping) and c.get("type") == "DisruptionTarget" for c in r.get("onPodConditions") or [])
           for r in rules):
        return [], []
    return [{"op": "add", "path": "/spec/podFailurePolicy/rules/0", "value": IGNORE_DISRUPTION}], []


# -- helpers -------------------------------------------------------------------------------------


def _parse(body: bytes | str | Mapping[str, Any]) -> Mapping[str, Any]:
    if isinstance(body, Mapping):
        doc: Any = body
    else:
        if len(body) > MAX_BODY_BYTES:
            raise Denied(f"body of {len(body)} bytes exceeds {MAX_BODY_BYTES}", field="body")
        try:
            doc = json.loads(body)
        except (ValueError, UnicodeDecodeError) as exc:
            raise Denied(f"not JSON ({exc})", field="body") from None
        except RecursionError:
            raise Denied("nested too deeply to be an AdmissionReview", field="body") from None
    doc = _mapping(doc, "body")
    if doc.get("apiVersion") != API_VERSION or doc.get("kind") != "AdmissionReview":
        raise Denied(f"expected apiVersion {API_VERSION} kind AdmissionReview, got "
                     f"{doc.get('apiVersion')!r} {doc.get('kind')!r}", field="apiVersion")
    return doc


def _mapping(value: Any, field: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise Denied(f"expected an object, got {type(value).__name__}", field=field)
    return value


def _string_map(value: Any, field: str) -> Mapping[str, str]:
    if value is None:
        return {}
    value = _mapping(value, field)
    for key, item in value.items():
        if not isinstance(item, str):
            raise Denied(f"expected a string, got {type(item).__name__}", field=f"{field}[{key}]")
    return value


def _put_key(meta: Mapping[str, Any], part: str, key: str, value: str) -> dict[str, Any]:
    """JSON Patch op setting ``metadata.<part>[key]`` (creating the map when absent; RFC 6901
    escapes ``/`` as ``~1``)."""
    if not meta.get(part):
        return {"op": "add", "path": f"/metadata/{part}", "value": {**(meta.get(part) or {}), key: value}}
    return {"op": "add", "path": f"/metadata/{part}/{key.replace('~', '~0').replace('/', '~1')}", "value": value}


def _answer(uid: str, *, allowed: bool, patch: list[dict[str, Any]] | None = None,
            warnings: list[str] | None = None, message: str = "") -> dict[str, Any]:
    response: dict[str, Any] = {"uid": uid, "allowed": allowed}
    if patch:
        response["patchType"] = "JSONPatch"
        response["patch"] = base64.b64encode(json.dumps(patch, separators=(",", ":")).encode()).decode()
    if warnings:
        response["warnings"] = warnings
    if not allowed:
        response["status"] = {"code": 400, "reason": "BadRequest", "message": message}
    return {"apiVersion": API_VERSION, "kind": "AdmissionReview", "response": response}
