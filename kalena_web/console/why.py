"""Why-pending records (engine ``WhyPending.to_dict()``) shaped for reading."""

from __future__ import annotations


def rejection_lines(record: dict) -> list[str]:
    """The why-pending record's typed rejection examples as sentences an operator reads."""
    lines = []
    for r in record.get("rejections") or []:
        kind, node = r.get("kind", "?"), r.get("node", "?")
        if "shortfall" in r:
            lines.append(f"{node}: needs {r['requested']:,.2f} {r['unit']} of {kind}, {r['free']:,.2f} free "
                         f"(short by {r['shortfall']:,.2f})")
        else:
            extra = ", ".join(f"{k} {v}" for k, v in r.items() if k not in ("kind", "node"))
            lines.append(f"{node}: {kind.replace('_', ' ')}" + (f" ({extra})" if extra else ""))
    return lines
