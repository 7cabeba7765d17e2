"""Numbers for operators: internal units (mcpu, bytes — docs/design.md §2) shown in Kuberina IR units
(cores, GiB), shares as percentages, replay times as clock times.

Examples::

    cores(61750.0)        → "61.75"         gib(2**30 * 253.25) → "253.25"
    quantity("cpu", 1500) → "1.5 cores"     pct(0.13464)        → "13.5 %"
    clock(45_900)         → "12:45"         clock(90_000)       → "1d 01:00"
    duration(7_500)       → "2 h 05 min"
"""

from __future__ import annotations

import math
import numbers

GIB = float(2**30)


def _is_number(value) -> bool:
    # numbers.Real covers numpy's floating and integer scalars without importing numpy here (the
    # command line's thin client formats why-pending records with this module)
    return not isinstance(value, bool) and isinstance(value, numbers.Real)


def _number(value: float, decimals: int) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "–"
    if math.isinf(value):
        return "unconstrained"
    text = f"{value:,.{decimals}f}"
    if "." in text:
        text = text.rstrip("0").rstrip(".")
    return "0" if text in ("-0", "") else text


def amount(value: float | None, decimals: int = 2) -> str:
    """A shortfall or reduction: ``decimals`` places, but a nonzero amount never reads as zero —
    below ``10**-decimals`` it keeps two significant digits: ``0.00022`` → ``"0.00022"``,
    ``1.234`` → ``"1.23"``, ``0`` → ``"0"``."""
    if value is None or not isinstance(value, int | float) or math.isnan(value) or math.isinf(value) \
            or value == 0 or abs(value) >= 10.0 ** -decimals:
        return _number(value, decimals) if isinstance(value, int | float) else "–"
    return f"{value:.2g}" if abs(value) >= 1e-4 else f"{value:.1e}"


CONDITIONS = {"ram": "memory pressure", "cpu": "CPU pressure"}
#: eviction causes that are no node pressure: the orchestrator stopped the pod
NOT_PRESSURE = {"node_drained": "node drained", "node_lost": "node lost", "orchestrator": "stopped by the orchestrator"}


def eviction_condition(reason: str, dimension: str | None) -> str:
    """What evicted a pod, condition first: the node condition, then how the victim was chosen
    (``"priority"`` only ordered the victims). ``("priority", "ram")`` → ``"memory pressure ·
    lowest priority chosen"``; ``("limit_breach", "ram")`` → ``"memory pressure · over its limit"``; a
    cause that is no pressure in its own words: ``("node_drained", "")`` → ``"node drained"``."""
    if not dimension and reason in NOT_PRESSURE:
        return NOT_PRESSURE[reason]
    condition = CONDITIONS.get(dimension or "", f"{dimension} pressure" if dimension else "node pressure")
    how = {"priority": "lowest priority chosen", "limit_breach": "over its limit"}.get(reason,
                                                                                     reason.replace("_", " "))
    return f"{condition} · {how}"


def cores(mcpu: float | None, decimals: int = 2) -> str:
    """Millicores → cores, e.g. ``61750`` → ``"61.75"``; missing (``None`` or the empty string a
    template gives for an absent value) → ``"–"``."""
    return _number(mcpu / 1000.0, decimals) if _is_number(mcpu) else "–"


def cores_text(mcpu: float | None, decimals: int = 2) -> str:
    """Millicores → cores with the unit, singular for exactly one: ``1000`` → ``"1 core"``,
    ``61750`` → ``"61.75 cores"``, ``None`` → ``"– cores"``."""
    number = cores(mcpu, decimals)
    return f"{number} {'core' if number == '1' else 'cores'}"


def gib(value_bytes: float | None, decimals: int = 2) -> str:
    """Bytes → GiB, e.g. ``2**31`` → ``"2"``; missing → ``"–"``."""
    return _number(value_bytes / GIB, decimals) if _is_number(value_bytes) else "–"


def in_ir(dim: str, value: float) -> float:
    """One internal-unit value in the IR unit of ``dim`` (cores, GiB, devices, MB/s)."""
    from kalena_engine.resources import DIM_INDEX, IR_TO_INTERNAL

    return value / IR_TO_INTERNAL[DIM_INDEX[dim]]


def quantity(dim: str, value: float | None) -> str:
    """A value with its IR unit, e.g. ``("ram", 2**30)`` → ``"1 GiB"`` (engine formatting); a
    missing value (``None``, or the empty string a template gives for a key a record lacks) → ``"–"``."""
    if not _is_number(value):
        return "–"
    from kalena_engine.resources import format_quantity

    return format_quantity(dim, value)


def pct(ratio: float | None, decimals: int = 1) -> str:
    """A 0–1 share as a percentage, e.g. ``0.13464`` → ``"13.5 %"``."""
    if not _is_number(ratio) or math.isnan(ratio):  # None, or a template's "" for a missing key
        return "–"
    return f"{ratio * 100:.{decimals}f} %"


def clock(seconds: float | None) -> str:
    """Replay time (s from start) as ``HH:MM`` (``Nd HH:MM`` past a day; ``HH:MM:SS`` when
    not on a minute)."""
    if seconds is None:
        return "–"
    total = round(float(seconds))
    days, rest = divmod(total, 86_400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    text = f"{hours:02d}:{minutes:02d}" + (f":{secs:02d}" if secs else "")
    return f"{days}d {text}" if days else text


def utc(unix_s: float | None) -> str:
    """Unix seconds as a UTC wall-clock time, ``2026-11-29 09:15:03`` (live clusters); missing
    (``None``, or a template's empty string: a workload without a reservation yet) → ``"–"``."""
    if not _is_number(unix_s):
        return "–"
    from datetime import datetime, timezone

    return datetime.fromtimestamp(float(unix_s), tz=timezone.utc).strftime("%Y-%m-%d %H:%M:%S")


def duration(seconds: float | None) -> str:
    """A length of time, e.g. ``7500`` → ``"2 h 05 min"``, ``42`` → ``"42 s"``."""
    if seconds is None:
        return "–"
    total = round(float(seconds))
    if total < 60:
        return f"{total} s"
    hours, rest = divmod(total, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours} h {minutes:02d} min"
    return f"{minutes} min" + (f" {secs:02d} s" if secs else "")


def integer(value: float | int | None) -> str:
    """Thousands separators, e.g. ``903427`` → ``"903,427"``."""
    return "–" if value is None else f"{int(round(value)):,}"
