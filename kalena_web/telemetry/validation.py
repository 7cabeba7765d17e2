"""Checking what an agent sends, one sample at a time (docs/design.md §12: bad input changes nothing).

The message envelope and each sample record are checked against the wire schema with the
protocol's own validator (:func:`agents.link.protocol.validate_agent_message`); then every
measured value, the time and the workload. A bad sample is rejected with a reason and a detail
naming what and where (``samples[3].usage.cpu_mcpu: nan``); the good samples of the same batch
are kept. Pure functions over plain data: no database, no clock (``now_s`` is an argument).

Reasons (per sample unless noted; counted per node and reason, shown in the console and API):

==================  ==========================================================================
``schema``          not an object, a field missing or of the wrong type (protocol schema); a
                    whole message when its envelope is malformed
``unit``            a usage vector whose keys are not the protocol's unit-named keys
                    (``cpu_mcpu``, ``ram_bytes``, … — e.g. ``cpu_cores`` or ``ram_gib``)
``not_finite``      NaN or ±infinity in a measured value or a time
``negative``        a negative measured value
``out_of_range``    usage above ``KALENA_INGEST_MAX_USAGE_RATIO`` × the node's allocatable on that
                    dimension (a unit slip such as bytes sent as KiB×1024²), PSI outside 0–100 %
``future``          stamped more than ``KALENA_INGEST_MAX_FUTURE_S`` ahead of the server clock
``too_old``         older than ``KALENA_INGEST_MAX_AGE_S``
``time_backwards``  not newer than the workload's last accepted sample
``unknown_workload`` not a live workload on this node (see :func:`resolve_workload`)
``daemonset``       a DaemonSet's sample: Phase-0 ballast, not tracked (counted, not an error)
``oversize_batch``  beyond ``KALENA_INGEST_MAX_BATCH_SAMPLES`` in one message (the first ones
                    are kept), or a frame over ``KALENA_INGEST_MAX_FRAME_BYTES`` (whole message)
``bad_json``        (message) a frame that is not JSON
``node_mismatch``   (message) the message names another node than the connection's token
``unknown_type``    (message) not ``samples``/``action``/``gap`` after ``hello``
``foreign_workload`` (message) an ``action`` naming a workload placed on another node
                    (:mod:`kalena_web.telemetry.consumers`; counted and audited)
``agent_dropped``   (from ``gap``) samples the agent's own buffer dropped before sending
==================  ==========================================================================
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from agents.errors import ProtocolError
from agents.link.protocol import USAGE_KEYS, validate_agent_message, validate_sample_record

REASONS: dict[str, str] = {
    "schema": "malformed (protocol schema)",
    "unit": "usage keys do not name Kalena's units",
    "not_finite": "NaN or infinity",
    "negative": "negative value",
    "out_of_range": "implausible magnitude for its unit",
    "future": "timestamp in the future",
    "too_old": "timestamp too old",
    "time_backwards": "time went backwards for the workload",
    "unknown_workload": "workload not on this node in the inventory",
    "daemonset": "DaemonSet (not tracked)",
    "oversize_batch": "batch over the size limit",
    "bad_json": "frame is not JSON",
    "node_mismatch": "message for another node",
    "unknown_type": "unknown message type",
    "foreign_workload": "action on another node's workload",
    "agent_dropped": "dropped by the agent's buffer",
    "unstorable": "could not be stored",
}
PSI_RESOURCES = ("cpu", "memory", "io")
#: A ``batch_id`` is at most this long: ``<node>:<epoch>:<seq>`` with a 253-character node name
#: (the longest Kubernetes allows), 12 hex digits of epoch and a 20-digit seq is 287.
MAX_BATCH_ID_CHARS = 300


class Rejected(Exception):
    """One sample or message refused: ``reason`` (a key of :data:`REASONS`) and ``detail``."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason = reason
        self.detail = detail[:500]


@dataclass(frozen=True)
class Limits:
    """Ingest limits (settings ``KALENA_INGEST_*``)."""

    max_batch_samples: int = 2000
    max_future_s: float = 120.0
    max_age_s: float = 7 * 86400.0
    max_usage_ratio: float = 4.0


@dataclass
class NodeView:
    """What checking needs to know about the connection's node.

    Attributes:
        node_id, name, shard: the node and its estimation shard.
        allocatable: ``(8,)`` internal units (``inf`` = unconstrained).
        by_name: inventory workload name (``namespace/pod``) → workload id, for the workloads
            on this node (production and bound batch).
        by_pod: the pod part of those names (after the last ``/``) → id, where unique on the node.
        last_ts: workload id → time of its last accepted sample (s).
    """

    node_id: int
    name: str
    shard: int
    allocatable: tuple[float, ...]
    by_name: dict[str, int] = field(default_factory=dict)
    by_pod: dict[str, int] = field(default_factory=dict)
    last_ts: dict[int, float] = field(default_factory=dict)


def pod_index(by_name: Mapping[str, int]) -> dict[str, int]:
    """``{pod part: id}`` of ``namespace/pod`` names, keeping only parts unique on the node."""
    seen: dict[str, int] = {}
    dup: set[str] = set()
    for name, wid in by_name.items():
        pod = name.rsplit("/", 1)[-1]
        if pod in seen:
            dup.add(pod)
        seen[pod] = wid
    return {k: v for k, v in seen.items() if k not in dup}


def resolve_workload(record: Mapping[str, Any], view: NodeView) -> int | None:
    """The inventory workload a sample is about, or None.

    In order: the record's ``workload`` id equals an inventory name on this node (Kubernetes
    ``namespace/pod``; a workloads-file ``id`` written as ``namespace/pod``). For the other kinds
    only (``docker``, ``process``: their ids are container ids or file ids), its ``name`` may
    then equal an inventory name, or the pod part of exactly one inventory name on the node
    (a container named ``web-0`` for ``default/web-0``). A Kubernetes id is never matched by name.
    """
    wid = view.by_name.get(record["workload"])
    if wid is None and record.get("kind") != "kubernetes":
        name = record.get("name")
        if isinstance(name, str):
            wid = view.by_name.get(name)
            if wid is None:
                wid = view.by_pod.get(name)
    return wid


def _number(value: Any, where: str, *, nullable: bool = True) -> float | None:
    if value is None:
        if nullable:
            return None
        raise Rejected("schema", f"{where}: missing")
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise Rejected("schema", f"{where}: expected a number, got {type(value).__name__}")
    try:
        number = float(value)
    except OverflowError:
        raise Rejected("not_finite", f"{where}: {value!r} overflows") from None
    if not math.isfinite(number):
        raise Rejected("not_finite", f"{where}: {number}")
    if number < 0:
        raise Rejected("negative", f"{where}: {number}")
    return number


def _protocol(message: Mapping[str, Any], where: str, *, record: Mapping[str, Any] | None = None) -> None:
    """Run the protocol's own validator — over ``record`` alone (one sample record, against
    :func:`~agents.link.protocol.validate_sample_record`) when given, else over ``message`` — and
    turn its error into a :class:`Rejected` naming ``where`` and the field."""
    try:
        if record is not None:
            validate_sample_record(record, where)
        else:
            validate_agent_message(message)
    except ProtocolError as exc:
        field_name = exc.field or ""
        vector = record.get(field_name) if record is not None else None
        if field_name in ("usage", "request", "limit", "reservation") and isinstance(vector, Mapping):
            got = ", ".join(sorted(str(k) for k in vector)[:8])
            raise Rejected("unit", f"{where}.{field_name}: keys {got} (accepted: {', '.join(USAGE_KEYS)})") from None
        raise Rejected("schema", f"{where}{'.' + field_name if field_name else ''}: {exc.problem}") from None


def check_envelope(message: Any, *, node: str) -> str:
    """Check an agent message's envelope (everything but its sample records); returns its type.

    Raises:
        Rejected: ``schema`` / ``unknown_type`` / ``node_mismatch`` / ``not_finite``.
    """
    if not isinstance(message, Mapping):
        raise Rejected("schema", "<message>: expected a JSON object")
    kind = message.get("type")
    if kind not in ("samples", "action", "gap"):
        raise Rejected("unknown_type", f"<message>.type: {kind!r} (accepted: samples, action, gap)")
    if kind == "samples":
        records = message.get("samples")
        if not isinstance(records, list):
            raise Rejected("schema", "<samples>.samples: expected a list")
        _protocol({**message, "samples": []}, "<samples>")
    else:
        _protocol(message, f"<{kind}>")
    batch_id = message["batch_id"]
    if not batch_id or len(batch_id) > MAX_BATCH_ID_CHARS or "\x00" in batch_id:
        raise Rejected("schema", f"<{kind}>.batch_id: 1–{MAX_BATCH_ID_CHARS} characters without NUL, "
                                 f"got {batch_id[:40]!r}")
    if message["node"] != node:
        raise Rejected("node_mismatch", f"<{kind}>.node: {message['node'][:100]!r}, but this connection's token "
                                        f"is for node {node!r}")
    _number(message["ts"], f"<{kind}>.ts", nullable=False)
    if kind == "gap":
        for count in ("dropped_batches", "dropped_samples"):
            value = message.get(count)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise Rejected("schema", f"<gap>.{count}: {str(value)[:40]} is not a count (a whole number ≥ 0)")
    return kind


def check_time(ts: float, where: str, *, now_s: float, limits: Limits) -> None:
    if ts > now_s + limits.max_future_s:
        raise Rejected("future", f"{where}: {ts:.3f} is {ts - now_s:.0f} s ahead of the server clock "
                                 f"(accepted: up to {limits.max_future_s:g} s)")
    if ts < now_s - limits.max_age_s:
        raise Rejected("too_old", f"{where}: {ts:.3f} is {now_s - ts:.0f} s old (accepted: up to {limits.max_age_s:g} s)")


def _psi(psi: Any, where: str) -> tuple[float | None, ...]:
    """Six avg10 values (cpu/memory/io × some/full) of a ``psi`` object, in percent."""
    out: list[float | None] = [None] * 6
    if psi is None:
        return tuple(out)
    if not isinstance(psi, Mapping):
        raise Rejected("schema", f"{where}: expected an object or null")
    for r, resource in enumerate(PSI_RESOURCES):
        stats = psi.get(resource)
        if stats is None:
            continue
        if not isinstance(stats, Mapping):
            raise Rejected("schema", f"{where}.{resource}: expected an object or null")
        for k, kind in enumerate(("some", "full")):
            part = stats.get(kind)
            if part is None:
                continue
            if not isinstance(part, Mapping):
                raise Rejected("schema", f"{where}.{resource}.{kind}: expected an object or null")
            value = _number(part.get("avg10"), f"{where}.{resource}.{kind}.avg10")
            if value is not None and value > 100.0:
                raise Rejected("out_of_range", f"{where}.{resource}.{kind}.avg10: {value} (accepted: 0–100 %)")
            out[2 * r + k] = value
    return tuple(out)


def check_sample(record: Any, i: int, *, envelope: Mapping[str, Any], view: NodeView, now_s: float,
                 limits: Limits) -> tuple:
    """Check one sample record of a ``samples`` message; returns its :class:`Sample` row values
    (without the batch id): ``(node_id, workload_id, ts, 8 usage, memory_usage_bytes,
    nr_periods, nr_throttled, throttled_time_us, 6 PSI avg10)``. On success the workload's
    last accepted time in ``view`` moves to ``ts``.

    Raises:
        Rejected: with the reason (module table) and a detail naming ``samples[i].field``.
    """
    where = f"samples[{i}]"
    if not isinstance(record, Mapping):
        raise Rejected("schema", f"{where}: expected an object")
    _protocol(envelope, where, record=record)
    usage = record["usage"]
    values = []
    for d, key in enumerate(USAGE_KEYS):
        value = _number(usage[key], f"{where}.usage.{key}")
        if value is not None:
            cap = view.allocatable[d]
            if math.isfinite(cap) and cap > 0 and value > limits.max_usage_ratio * cap:
                raise Rejected("out_of_range", f"{where}.usage.{key}: {value:g} is over {limits.max_usage_ratio:g} × "
                                               f"the node's allocatable {cap:g} (wrong unit?)")
        values.append(value)
    memory = _number(record.get("memory_usage_bytes"), f"{where}.memory_usage_bytes")
    throttling = record.get("cpu_throttling")
    if throttling is None:
        periods = throttled = throttled_us = None
    elif isinstance(throttling, Mapping):
        periods = _number(throttling.get("nr_periods"), f"{where}.cpu_throttling.nr_periods", nullable=False)
        throttled = _number(throttling.get("nr_throttled"), f"{where}.cpu_throttling.nr_throttled", nullable=False)
        throttled_us = _number(throttling.get("throttled_time_us"), f"{where}.cpu_throttling.throttled_time_us",
                               nullable=False)
        if periods > 2**62 or throttled > 2**62:
            raise Rejected("out_of_range", f"{where}.cpu_throttling: counters beyond 2^62")
        periods, throttled = int(periods), int(throttled)
    else:
        raise Rejected("schema", f"{where}.cpu_throttling: expected an object or null")
    psi = _psi(record.get("psi"), f"{where}.psi")
    ts = record["ts"]
    if isinstance(ts, float) and not math.isfinite(ts):
        raise Rejected("not_finite", f"{where}.ts: {ts}")
    ts = float(ts)
    check_time(ts, f"{where}.ts", now_s=now_s, limits=limits)
    wid = resolve_workload(record, view)
    if wid is None:
        if record["tier"] == "daemonset":
            raise Rejected("daemonset", f"{where}: DaemonSet {record['workload'][:200]!r} is Phase-0 ballast, not tracked")
        raise Rejected("unknown_workload", f"{where}.workload: {record['workload'][:200]!r} is not a live workload "
                                           f"on node {view.name!r}")
    last = view.last_ts.get(wid)
    if last is not None and ts <= last:
        raise Rejected("time_backwards", f"{where}.ts: {ts:.3f} is not after the workload's last sample {last:.3f}")
    view.last_ts[wid] = ts
    return (view.node_id, wid, ts, *values, memory, periods, throttled, throttled_us, *psi)


def check_node_sample(node_sample: Any, *, now_s: float, limits: Limits) -> tuple | None:
    """The ``node_sample`` of a ``samples`` message as ``(ts, working_set_bytes, 6 PSI avg10)``,
    or None when absent.

    Raises:
        Rejected: naming ``node_sample.<field>``.
    """
    if node_sample is None:
        return None
    if not isinstance(node_sample, Mapping):
        raise Rejected("schema", "node_sample: expected an object or null")
    ts = _number(node_sample.get("ts"), "node_sample.ts", nullable=False)
    check_time(ts, "node_sample.ts", now_s=now_s, limits=limits)
    working_set = _number(node_sample.get("working_set_bytes"), "node_sample.working_set_bytes")
    return (ts, working_set, *_psi(node_sample.get("psi"), "node_sample.psi"))


def check_json_values(value: Any, where: str, depth: int = 0) -> None:
    """Refuse what a JSON column cannot hold faithfully: NaN/±inf, NUL characters, deep nesting.

    Raises:
        Rejected: ``not_finite`` or ``schema``.
    """
    if depth > 8:
        raise Rejected("schema", f"{where}: nested deeper than 8 levels")
    if isinstance(value, float):
        if not math.isfinite(value):
            raise Rejected("not_finite", f"{where}: {value}")
    elif isinstance(value, str):
        if "\x00" in value:
            raise Rejected("schema", f"{where}: contains a NUL character")
    elif isinstance(value, Mapping):
        for key, item in value.items():
            check_json_values(key, where, depth + 1)
            check_json_values(item, f"{where}.{key}", depth + 1)
    elif isinstance(value, list):
        for k, item in enumerate(value):
            check_json_values(item, f"{where}[{k}]", depth + 1)
