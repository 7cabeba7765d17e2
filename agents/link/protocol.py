"""Kalena agent ↔ control-plane link protocol, version 1.

Transport: one WebSocket per node (``wss://<console>/agent/v1/ws``), JSON text frames, UTF-8.
The agent authenticates in the handshake with its per-node token::

    Authorization: Bearer <token>

The server rejects a missing or unknown token with HTTP 401 before the upgrade. Delivery is
at-least-once: every agent→server message except ``hello`` carries a ``batch_id`` unique per
node (``"<node>:<epoch>:<seq>"``: a boot id drawn each time the agent's buffer is opened and a
sequence number; never reused, even when the buffer's file is lost); the agent keeps it in its on-disk
buffer until the server's ``ack`` for that ``batch_id`` arrives and resends it after a
reconnect, so **the server must de-duplicate on (node, batch_id)**. Numbers are in Kalena's
internal units (docs/design.md §2) with the unit in the key; ``null`` means not measured; times are
Unix seconds (float). Every message has ``"type"`` and ``"v": 1``.

Agent → server
--------------

``hello`` — first frame after every (re)connect::

    {"type": "hello", "v": 1, "node": "node-a", "agent_version": "0.1.0",
     "sampling_interval_s": 10.0, "cgroup_version": 1,
     "signal_sources": {"cpu": ["psi-trigger", "poll"],
                        "memory": ["eventfd-threshold", "psi-trigger", "poll"]},
     "trigger_window_s": 2.0, "capacity": {<usage vector>}, "buffered": 3, "ts": 1732860000.0}

``samples`` — one batch per sampling interval::

    {"type": "samples", "v": 1, "batch_id": "node-a:3f9c01d2a7b4:42", "node": "node-a", "ts": …,
     "interval_s": 10.0,
     "node_sample": {"ts": …, "working_set_bytes": …, "psi": {"cpu": <psi>, …}} | null,
     "samples": [{
        "workload": "default/web-0" | "<container id>" | "<file id>",
        "name": "web-0", "kind": "kubernetes" | "docker" | "process",
        "tier": "service" | "batch" | "daemonset", "priority": 0, "ts": …, "stale": false,
        "usage":       {<usage vector>},          # measured; memory = working set
        "request":     {<usage vector>},
        "limit":       {<usage vector>},          # null where none is declared
        "reservation": {<usage vector>},          # the agent's local estimate (docs/design.md §5)
        "memory_usage_bytes": … | null,           # raw usage incl. page cache
        "cpu_throttling": {"nr_periods": …, "nr_throttled": …, "throttled_time_us": …} | null,
        "psi": {"cpu": <psi>, "memory": <psi>, "io": <psi>} | null}]}

    <usage vector> = {"cpu_mcpu", "ram_bytes", "gpu_devices", "storage_bytes", "disk_read_bps",
                      "disk_write_bps", "net_in_bps", "net_out_bps"}: number | null
    <psi> = {"some": {"avg10": %, "avg60": %, "avg300": %, "total_us": µs},
             "full": {…} | null}

``action`` — every mitigation action, as it happens::

    {"type": "action", "v": 1, "batch_id": "node-a:3f9c01d2a7b4:43", "node": "node-a", "ts": …,
     "action": "throttle" | "cpu_weight" | "memory_cap" | "evict" | "kill" | "starvation_cap"
               | "starvation_release" | "hold",
     "reason": "cpu_budget" | "cpu_contention" | "contention_cleared" | "limit_breach"
               | "priority" | "grace_expired" | "anti_starvation" | "stale_sample"
               | "no_candidate" | "slack_memory",
     "workload": {"id", "name", "kind", "tier", "priority"} | null,
     "trigger": {"source": "psi-trigger" | "eventfd-threshold" | "poll" | "periodic",
                 "resource": "cpu" | "memory" | null, "scope": "node" | <workload id> | null},
     "numbers": {…},   # e.g. throttle: quota_us, period_us, share_mcpu, budget_mcpu,
                       #   capacity_mcpu, service_claim_mcpu, previous_quota_us;
                       # evict: dimension, capacity (less the DaemonSets' requests), working_set
                       #   (the node reading less the DaemonSets' memory within their requests),
                       #   node_working_set, ledger_before, ledger_after, usage, reservation, limit,
                       #   acute, grace_s
     "result": {"ok": true, "error": null, "writes": [[target, text], …],
                "latency_ms": 1.2 | null, "dry_run": false,
                "detected_s": 1.7e9}}   # only when a pressure signal triggered it: its Unix time

``gap`` — the bounded buffer overflowed and dropped the oldest sample batches::

    {"type": "gap", "v": 1, "batch_id": …, "node": …, "ts": …, "dropped_batches": 3,
     "dropped_samples": 600, "first_dropped": "node-a:3f9c01d2a7b4:7", "last_dropped": "node-a:3f9c01d2a7b4:9"}

Server → agent
--------------

``welcome`` — ``{"type": "welcome", "v": 1, "node": "node-a"}``: the ``hello`` was accepted; the
agent reports itself connected only now. A refused ``hello`` gets ``error`` and a close instead.

Close codes the agent acts on: 4403 — refused (``node_mismatch``, a bad or missing ``hello``;
the ``error`` before it names the reason), 4401 — the token was revoked, 4409 — superseded by a
newer link for the same node (one live link per node), 4500 — not stored, reconnect and resend.

``ack`` — ``{"type": "ack", "v": 1, "batch_id": "node-a:3f9c01d2a7b4:42"}``: the message is stored; the
agent deletes it from its buffer.

``policy`` — optional run-time policy update: the ``estimator`` and ``eviction`` sections of a
policy file's ``spec`` (any subset of their keys, docs/design.md §10), and the cluster's policy
``version`` it carries (the control plane sends the whole estimator and eviction sections of its
current version after each ``hello`` and whenever a new version is saved). The engine's policy
parser (:func:`kalena_engine.policy_file.policy_with_sections`) reads them: an unknown key, a
wrong unit or a value out of range refuses the whole message, naming the key and the accepted
range, and the policy in force stays::

    {"type": "policy", "v": 1, "version": 4, "estimator": {"margin_ratio": 1.2},
     "eviction": {"min_run_time_s": 60}}

The agent reports the version it applies as ``policy_version`` (an integer, or null before any
``policy`` message) in every ``hello`` and ``samples`` message.

``error`` — ``{"type": "error", "v": 1, "message": "…"}``: logged by the agent.

Anything else — bad JSON, an unknown type or field, a wrong type — is a
:class:`~agents.errors.ProtocolError` naming the field; it changes nothing.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from agents.errors import ProtocolError
from agents.model import NodeReading, UsageSample, Workload
from kalena_engine.errors import PolicyError
from kalena_engine.policy import Policy
from kalena_engine.policy_file import policy_with_sections

VERSION = 1
USAGE_KEYS: tuple[str, ...] = ("cpu_mcpu", "ram_bytes", "gpu_devices", "storage_bytes", "disk_read_bps",
                               "disk_write_bps", "net_in_bps", "net_out_bps")
AGENT_TYPES = ("hello", "samples", "action", "gap")
SERVER_TYPES = ("welcome", "ack", "policy", "error")
POLICY_SECTIONS = ("estimator", "eviction")  # what an agent applies of the cluster's policy
ACTIONS = ("throttle", "cpu_weight", "memory_cap", "evict", "kill", "starvation_cap", "starvation_release", "hold")
TRIGGER_SOURCES = ("psi-trigger", "eventfd-threshold", "poll", "periodic")


def _number(value: float) -> float | None:
    value = float(value)
    return value if math.isfinite(value) else None


def usage_vector(values: np.ndarray) -> dict[str, float | None]:
    """``(8,)`` internal-unit vector → ``{"cpu_mcpu": …, …}``; NaN and ±inf → ``null``."""
    return {key: _number(values[i]) for i, key in enumerate(USAGE_KEYS)}


def hello_message(*, node: str, agent_version: str, sampling_interval_s: float, cgroup_version: int,
                  signal_sources: Mapping[str, str], trigger_window_s: float, capacity: np.ndarray,
                  buffered: int, ts: float, policy_version: int | None = None) -> dict[str, Any]:
    return {"type": "hello", "v": VERSION, "node": node, "agent_version": agent_version,
            "policy_version": policy_version,
            "sampling_interval_s": float(sampling_interval_s), "cgroup_version": int(cgroup_version),
            "signal_sources": dict(signal_sources), "trigger_window_s": float(trigger_window_s),
            "capacity": usage_vector(capacity), "buffered": int(buffered), "ts": float(ts)}


def sample_record(workload: Workload, sample: UsageSample, *, reservation: np.ndarray, stale: bool) -> dict[str, Any]:
    """One entry of a ``samples`` message."""
    return {
        "workload": workload.id, "name": workload.name, "kind": workload.kind, "tier": workload.tier,
        "priority": int(workload.priority), "ts": float(sample.ts_s), "stale": bool(stale),
        "usage": usage_vector(sample.usage), "request": usage_vector(workload.request),
        "limit": usage_vector(workload.limit), "reservation": usage_vector(reservation),
        "memory_usage_bytes": _number(sample.memory_usage_bytes),
        "cpu_throttling": None if sample.cpu_throttling is None else {
            "nr_periods": int(sample.cpu_throttling.nr_periods),
            "nr_throttled": int(sample.cpu_throttling.nr_throttled),
            "throttled_time_us": float(sample.cpu_throttling.throttled_time_us)},
        "psi": {k: v.as_dict() for k, v in sample.psi.items()} or None,
    }


def samples_message(*, node: str, ts: float, interval_s: float, records: list[dict[str, Any]],
                    node_reading: NodeReading | None, policy_version: int | None = None) -> dict[str, Any]:
    """A ``samples`` message without its ``batch_id`` (the buffer assigns it)."""
    node_sample = None
    if node_reading is not None:
        node_sample = {"ts": float(node_reading.ts_s), "working_set_bytes": _number(node_reading.working_set_bytes),
                       "psi": {k: v.as_dict() for k, v in node_reading.psi.items()} or None}
    return {"type": "samples", "v": VERSION, "node": node, "ts": float(ts), "interval_s": float(interval_s),
            "node_sample": node_sample, "samples": records, "policy_version": policy_version}


def workload_ref(workload: Workload | None) -> dict[str, Any] | None:
    if workload is None:
        return None
    return {"id": workload.id, "name": workload.name, "kind": workload.kind, "tier": workload.tier,
            "priority": int(workload.priority)}


def action_message(*, node: str, ts: float, action: str, reason: str, workload: Workload | None,
                   trigger: Mapping[str, Any], numbers: Mapping[str, Any], result: Mapping[str, Any]) -> dict[str, Any]:
    """An ``action`` message without its ``batch_id``."""
    if action not in ACTIONS:
        raise ValueError(f"unknown action {action!r}")
    clean = {k: (_number(v) if isinstance(v, float) else v) for k, v in numbers.items()}
    return {"type": "action", "v": VERSION, "node": node, "ts": float(ts), "action": action, "reason": reason,
            "workload": workload_ref(workload), "trigger": dict(trigger), "numbers": clean, "result": dict(result)}


def gap_message(*, node: str, ts: float, dropped_batches: int, dropped_samples: int, first_dropped: str,
                last_dropped: str) -> dict[str, Any]:
    return {"type": "gap", "v": VERSION, "node": node, "ts": float(ts), "dropped_batches": int(dropped_batches),
            "dropped_samples": int(dropped_samples), "first_dropped": first_dropped, "last_dropped": last_dropped}


def encode(message: Mapping[str, Any]) -> str:
    """JSON text of a message (no NaN/Infinity: those are ``null`` by construction)."""
    return json.dumps(message, separators=(",", ":"), allow_nan=False)


#: Room kept in every frame for the ``batch_id`` the buffer adds (a 253-character node name,
#: the buffer's epoch and a sequence number fit).
BATCH_ID_ROOM_BYTES = 320


def split_samples(message: Mapping[str, Any], *, max_samples: int, max_bytes: int) -> list[dict[str, Any]]:
    """Split a ``samples`` message into parts that each hold at most ``max_samples`` records
    and encode to at most ``max_bytes`` bytes once a ``batch_id`` is added (the server's
    ``KALENA_INGEST_MAX_BATCH_SAMPLES`` and frame limits). Records keep their order; the
    ``node_sample`` goes with the first part. Any other message, or one that fits, is returned
    as the only part. A single record larger than ``max_bytes`` travels alone (the server
    refuses it as ``oversize_batch`` and counts it). Sizes are UTF-8 bytes of :func:`encode`.

    Example: 5,000 records of ~1 KB with ``max_samples=2000, max_bytes=2**20`` → parts of
    ≤ 1,000 records (1 MiB / ~1 KB), the first with the node sample.
    """
    records = message.get("samples") if message.get("type") == "samples" else None
    if not isinstance(records, list):
        return [dict(message)]
    envelope = {k: v for k, v in message.items() if k != "samples"}
    base = len(encode({**envelope, "samples": []}).encode()) + BATCH_ID_ROOM_BYTES
    sizes = [len(encode(r).encode()) + 1 for r in records]     # + the separating comma
    if len(records) <= max_samples and base + sum(sizes) <= max_bytes:
        return [dict(message)]
    parts: list[list[Any]] = [[]]
    size = base
    for record, n in zip(records, sizes):
        if parts[-1] and (len(parts[-1]) >= max_samples or size + n > max_bytes):
            parts.append([])
            size = base
        parts[-1].append(record)
        size += n
    return [{**envelope, "node_sample": envelope.get("node_sample") if i == 0 else None, "samples": part}
            for i, part in enumerate(parts)]


# --- validation (agent → server), for the server implementation and the tests ---------------

def _require(obj: Mapping[str, Any], key: str, kinds: tuple[type, ...], where: str, *, nullable: bool = False) -> Any:
    if key not in obj:
        raise ProtocolError("missing", source=where, field=key)
    value = obj[key]
    if value is None and nullable:
        return None
    if isinstance(value, bool) and bool not in kinds:
        raise ProtocolError(f"expected {'/'.join(k.__name__ for k in kinds)}, got {value!r}", source=where, field=key)
    if not isinstance(value, kinds):
        raise ProtocolError(f"expected {'/'.join(k.__name__ for k in kinds)}, got {type(value).__name__}",
                            source=where, field=key)
    return value


_USAGE_KEY_SET = frozenset(USAGE_KEYS)


def _vector(obj: Any, where: str, field: str) -> None:
    if not isinstance(obj, Mapping) or obj.keys() != _USAGE_KEY_SET:
        raise ProtocolError("expected a usage vector", source=where, field=field, accepted=", ".join(USAGE_KEYS))
    for key in USAGE_KEYS:
        value = obj[key]
        if value is not None and type(value) not in (int, float):  # the common case stays cheap
            _require(obj, key, (int, float), where, nullable=True)


def validate_sample_record(record: Any, where: str) -> None:
    """Check one record of a ``samples`` message (``where`` names it in errors).

    Raises:
        ProtocolError: naming the record and the field.
    """
    if not isinstance(record, Mapping):
        raise ProtocolError("expected an object", source=where)
    _require(record, "workload", (str,), where)
    _require(record, "tier", (str,), where)
    _require(record, "ts", (int, float), where)
    for key in ("usage", "request", "limit", "reservation"):
        _vector(record.get(key), where, key)


def validate_agent_message(message: Any) -> None:
    """Check an agent→server message against the schema above.

    Raises:
        ProtocolError: naming the message type and the field.
    """
    if not isinstance(message, Mapping):
        raise ProtocolError("expected a JSON object", source="<message>")
    kind = message.get("type")
    if kind not in AGENT_TYPES:
        raise ProtocolError(f"unknown type {kind!r}", source="<message>", field="type", accepted=", ".join(AGENT_TYPES))
    where = f"<{kind}>"
    if message.get("v") != VERSION:
        raise ProtocolError(f"unsupported version {message.get('v')!r}", source=where, field="v", accepted=str(VERSION))
    _require(message, "node", (str,), where)
    _require(message, "ts", (int, float), where)
    if kind != "hello":
        _require(message, "batch_id", (str,), where)
    if kind == "hello":
        _require(message, "agent_version", (str,), where)
        _require(message, "sampling_interval_s", (int, float), where)
        _require(message, "signal_sources", (dict,), where)
        _vector(message.get("capacity"), where, "capacity")
    elif kind == "samples":
        for i, record in enumerate(_require(message, "samples", (list,), where)):
            validate_sample_record(record, f"{where}.samples[{i}]")
    elif kind == "action":
        action = _require(message, "action", (str,), where)
        if action not in ACTIONS:
            raise ProtocolError(f"unknown action {action!r}", source=where, field="action", accepted=", ".join(ACTIONS))
        _require(message, "reason", (str,), where)
        _require(message, "numbers", (dict,), where)
        trigger = _require(message, "trigger", (dict,), where)
        if trigger.get("source") not in TRIGGER_SOURCES:
            raise ProtocolError(f"unknown trigger source {trigger.get('source')!r}", source=where,
                                field="trigger.source", accepted=", ".join(TRIGGER_SOURCES))
        _require(_require(message, "result", (dict,), where), "ok", (bool,), where)
    elif kind == "gap":
        _require(message, "dropped_batches", (int,), where)
        _require(message, "dropped_samples", (int,), where)


# --- server → agent ----------------------------------------------------------------------------

@dataclass(frozen=True)
class Ack:
    batch_id: str


@dataclass(frozen=True)
class PolicyUpdate:
    """Changes to apply on top of the current policy (section → field → value, as a policy
    file's ``spec``); ``version`` is the cluster's policy version they come from (None when the
    sender gave none). Read and applied by the engine's parser
    (:func:`kalena_engine.policy_file.policy_with_sections`), the only one."""

    estimator: Mapping[str, float]
    eviction: Mapping[str, float]
    version: int | None = None

    def apply(self, policy: Policy) -> Policy:
        """``policy`` with these changes (raises :class:`~kalena_engine.errors.PolicyError` when
        the combination is refused, e.g. acute_ratio below evict_threshold_ratio)."""
        return policy_with_sections(policy, {"estimator": dict(self.estimator), "eviction": dict(self.eviction)},
                                    source="<policy>", sections=POLICY_SECTIONS)


@dataclass(frozen=True)
class Welcome:
    node: str


@dataclass(frozen=True)
class ServerError:
    message: str


def parse_server_message(text: str | bytes) -> Welcome | Ack | PolicyUpdate | ServerError:
    """Decode one server frame.

    Raises:
        ProtocolError: bad JSON, unknown type, or a malformed field (named).
    """
    try:
        message = json.loads(text)
    except (ValueError, UnicodeDecodeError) as exc:
        raise ProtocolError(f"not JSON: {exc}", source="<server frame>") from None
    if not isinstance(message, Mapping):
        raise ProtocolError("expected a JSON object", source="<server frame>")
    kind = message.get("type")
    where = f"<{kind}>" if isinstance(kind, str) else "<server frame>"
    if kind == "welcome":
        return Welcome(_require(message, "node", (str,), where))
    if kind == "ack":
        return Ack(_require(message, "batch_id", (str,), where))
    if kind == "policy":
        unknown = sorted(set(message) - {"type", "v", "version", "estimator", "eviction"})
        if unknown:
            raise ProtocolError(f"unknown field {unknown[0]!r}", source=where, accepted="version, estimator, eviction")
        version = message.get("version")
        if version is not None and (isinstance(version, bool) or not isinstance(version, int) or version < 0):
            raise ProtocolError(f"{version!r} is not a policy version", source=where, field="version",
                                accepted="a whole number ≥ 0")
        sections = {name: message.get(name) or {} for name in POLICY_SECTIONS}
        try:  # the engine's parser checks every key, unit and range (and the combination)
            policy_with_sections(Policy(), sections, source=where, sections=POLICY_SECTIONS)
        except PolicyError as exc:
            raise ProtocolError(exc.problem, source=where, field=exc.field, accepted=exc.accepted) from None
        return PolicyUpdate(dict(sections["estimator"]), dict(sections["eviction"]), version)
    if kind == "error":
        return ServerError(str(message.get("message", "")))
    raise ProtocolError(f"unknown type {kind!r}", source=where, field="type", accepted=", ".join(SERVER_TYPES))
