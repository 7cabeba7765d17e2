"""Why-pending records (engine ``WhyPending.to_dict()``) shaped for reading."""

from __future__ import annotations

from kalena_web.console.formatting import amount


def rejection_lines(record: dict) -> list[str]:
    """The why-pending record's typed rejection examples as sentences an operator reads."""
    lines = []
    for r in record.get("rejections") or []:
        kind, node = r.get("kind", "?"), r.get("node", "?")
        if "shortfall" in r:
            lines.append(f"{node}: needs {amount(r['requested'])} {r['unit']} of {kind}, {amount(r['free'])} free "
                         f"(short by {amount(r['shortfall'])})")
        else:
            extra = ", ".join(f"{k} {v}" for k, v in r.items() if k not in ("kind", "node"))
            lines.append(f"{node}: {kind.replace('_', ' ')}" + (f" ({extra})" if extra else ""))
    return lines
