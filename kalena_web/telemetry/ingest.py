"""Turning one agent message into what is stored: an :class:`Entry` (pure, no database).

An entry is one message's rows — its :class:`~kalena_web.telemetry.models.IngestBatch`, the
accepted :class:`~kalena_web.telemetry.models.Sample` rows, the node sample, the mitigation
event — and its rejections per reason. The group-commit writer
(:mod:`kalena_web.telemetry.writer`) stores many entries in one transaction
(:func:`kalena_web.telemetry.storage.store_entries`) and only then are they acknowledged.

A message whose envelope is malformed but carries a usable ``batch_id`` still becomes an entry
(no rows, its rejection counted) so that it is acknowledged once and recognised if resent; one
without a usable ``batch_id`` is only counted (``batch_id`` None) and never acknowledged.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from kalena_web.telemetry.validation import (
    MAX_BATCH_ID_CHARS, Limits, NodeView, Rejected, check_envelope, check_json_values, check_node_sample, check_sample,
    check_time, resolve_workload,
)


@dataclass(eq=False)
class Entry:
    """One message, ready to store (see module doc).

    Attributes:
        batch_id: the agent's id, or None for a message that is only counted.
        kind: ``samples`` | ``action`` | ``gap``.
        ts: the agent's send time (s); ``received_s`` when the frame arrived.
        samples: accepted :class:`Sample` rows, see :func:`~kalena_web.telemetry.validation.check_sample`.
        node_sample: ``(ts, working_set_bytes, 6 PSI avg10)`` or None.
        action: :class:`MitigationEvent` field values, for an ``action``.
        rejected: reason → ``[samples, messages, last detail]``.
        last_sample_s: newest accepted sample time.
        duplicate: set by storage when ``(node, batch_id)`` was stored before.
    """

    node_id: int
    shard: int
    batch_id: str | None
    kind: str
    ts: float
    received_s: float
    samples: list[tuple] = field(default_factory=list)
    node_sample: tuple | None = None
    action: dict[str, Any] | None = None
    rejected: dict[str, list] = field(default_factory=dict)
    last_sample_s: float | None = None
    duplicate: bool = False

    def reject(self, reason: str, detail: str, *, samples: int = 1, messages: int = 0) -> None:
        counts = self.rejected.setdefault(reason, [0, 0, ""])
        counts[0] += samples
        counts[1] += messages
        counts[2] = detail

    @property
    def rejected_samples(self) -> int:
        return sum(c[0] for c in self.rejected.values())

    def ack_payload(self) -> dict[str, Any]:
        """The ``ack`` frame: the protocol's fields plus what happened to the samples (for a
        resend of a stored message only ``duplicate``: it was counted the first time)."""
        if self.duplicate:
            return {"type": "ack", "v": 1, "batch_id": self.batch_id, "duplicate": True}
        return {"type": "ack", "v": 1, "batch_id": self.batch_id, "accepted": len(self.samples),
                "rejected": {reason: c[0] for reason, c in self.rejected.items() if c[0]},
                "duplicate": self.duplicate}


def _usable_batch_id(message: Any) -> str | None:
    if isinstance(message, Mapping):
        batch_id = message.get("batch_id")
        if isinstance(batch_id, str) and 0 < len(batch_id) <= MAX_BATCH_ID_CHARS and "\x00" not in batch_id:
            return batch_id
    return None


def _kind(message: Any) -> str:
    kind = message.get("type") if isinstance(message, Mapping) else None
    return kind if kind in ("samples", "action", "gap") else "samples"


def _float_ts(message: Any, default: float) -> float:
    ts = message.get("ts") if isinstance(message, Mapping) else None
    if isinstance(ts, int | float) and not isinstance(ts, bool):
        ts = float(ts)
        if ts == ts and abs(ts) < 1e12:
            return ts
    return default


def rejected_message(message: Any, error: Rejected, *, view: NodeView, received_s: float) -> Entry:
    """The entry of a message refused as a whole: counted; stored for de-duplication when it
    has a usable ``batch_id``."""
    records = message.get("samples") if isinstance(message, Mapping) else None
    n = len(records) if isinstance(records, list) else 0
    entry = Entry(node_id=view.node_id, shard=view.shard, batch_id=_usable_batch_id(message), kind=_kind(message),
                  ts=_float_ts(message, received_s), received_s=received_s)
    entry.reject(error.reason, error.detail, samples=n, messages=1)
    return entry


def prepare_message(message: Any, *, view: NodeView, now_s: float, received_s: float, limits: Limits) -> Entry:
    """Check a decoded agent message (after ``hello``) and build its entry. Never raises for
    bad input: refusals are in ``entry.rejected``."""
    try:
        kind = check_envelope(message, node=view.name)
    except Rejected as error:
        return rejected_message(message, error, view=view, received_s=received_s)
    entry = Entry(node_id=view.node_id, shard=view.shard, batch_id=message["batch_id"], kind=kind,
                  ts=float(message["ts"]), received_s=received_s)
    if kind == "samples":
        _samples(entry, message, view=view, now_s=now_s, limits=limits)
    elif kind == "action":
        try:
            entry.action = _action(message, view=view, now_s=now_s, limits=limits)
        except Rejected as error:
            entry.reject(error.reason, error.detail, samples=0, messages=1)
    else:
        dropped = message["dropped_samples"]
        entry.reject("agent_dropped", f"<gap>: the agent's buffer dropped {message['dropped_batches']} batch(es) "
                     f"{str(message.get('first_dropped'))[:80]}…{str(message.get('last_dropped'))[:80]}",
                     samples=max(0, dropped), messages=1)
    return entry


def _samples(entry: Entry, message: Mapping[str, Any], *, view: NodeView, now_s: float, limits: Limits) -> None:
    records = message["samples"]
    kept = records[:limits.max_batch_samples]
    if len(records) > len(kept):
        entry.reject("oversize_batch", f"<samples>.samples: {len(records)} samples, the first "
                     f"{limits.max_batch_samples} kept (KALENA_INGEST_MAX_BATCH_SAMPLES)",
                     samples=len(records) - len(kept))
    newest = None
    for i, record in enumerate(kept):
        try:
            row = check_sample(record, i, envelope=message, view=view, now_s=now_s, limits=limits)
        except Rejected as error:
            entry.reject(error.reason, error.detail)
            continue
        entry.samples.append(row)
        if newest is None or row[2] > newest:
            newest = row[2]
    entry.last_sample_s = newest
    try:
        entry.node_sample = check_node_sample(message.get("node_sample"), now_s=now_s, limits=limits)
    except Rejected as error:
        entry.reject(error.reason, error.detail)


def _text(value: Any, limit: int) -> str:
    return value[:limit] if isinstance(value, str) else ""


def _action(message: Mapping[str, Any], *, view: NodeView, now_s: float, limits: Limits) -> dict[str, Any]:
    """:class:`MitigationEvent` values of a (schema-valid) ``action`` message."""
    check_time(float(message["ts"]), "<action>.ts", now_s=now_s, limits=limits)
    for key in ("numbers", "result", "trigger", "workload", "reason", "action"):
        check_json_values(message.get(key), f"<action>.{key}")
    workload = message.get("workload")
    workload_id = None
    name = ""
    if isinstance(workload, Mapping) and isinstance(workload.get("id"), str):
        workload_id = resolve_workload({"workload": workload["id"], "name": workload.get("name")}, view)
        # a resolved workload is named as the inventory names it, never by what else the message
        # says: its own pod's id with another node's pod's name would record that pod as acted on
        name = next((n for n, wid in view.by_name.items() if wid == workload_id), "") if workload_id else ""
    else:
        workload = {}
    trigger = message["trigger"]
    priority = workload.get("priority")
    return {
        "ts": float(message["ts"]), "action": message["action"], "reason": _text(message["reason"], 40),
        "workload_id": workload_id, "workload_ref": _text(workload.get("id"), 300),
        "workload_name": name or _text(workload.get("name"), 300), "tier": _text(workload.get("tier"), 16),
        "priority": priority if isinstance(priority, int) and not isinstance(priority, bool)
        and abs(priority) < 2**31 else None,
        "trigger_source": trigger["source"], "trigger_resource": _text(trigger.get("resource"), 16),
        "trigger_scope": _text(trigger.get("scope"), 300),
        "numbers": dict(message["numbers"]), "result_ok": bool(message["result"]["ok"]),
        "result": dict(message["result"]),
    }
