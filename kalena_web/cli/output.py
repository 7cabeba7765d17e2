"""How ``kalena`` commands print what they found, as kubectl does: a table by default, more
columns with ``-o wide``, the REST API's answer with ``-o json`` or ``-o yaml``.

Light on purpose (no Django, numpy or pydantic): the command line imports it on every call.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Sequence
from typing import Any, TextIO

FORMATS = ("table", "wide", "json", "yaml")


def add_output_flag(parser, *, default: str = "table") -> None:  # type: ignore[no-untyped-def]
    """``-o/--output table|wide|json|yaml`` and the older ``--json`` (same as ``-o json``)."""
    parser.add_argument("-o", "--output", choices=FORMATS, default=default,
                        help="table (default), wide (more columns), json or yaml (the REST API's answer)")
    parser.add_argument("--json", dest="output", action="store_const", const="json", help="the same as -o json")


def dump(value: Any, fmt: str, out: TextIO | None = None) -> None:
    """``value`` (JSON-ready) as JSON (one line, keys sorted) or YAML (block style)."""
    out = out or sys.stdout
    if fmt == "yaml":
        import yaml

        out.write(yaml.safe_dump(value, sort_keys=True, allow_unicode=True, default_flow_style=False))
    else:
        out.write(json.dumps(value, sort_keys=True) + "\n")


Column = tuple[str, Callable[[Any], object]]


def table(rows: Sequence[Any], columns: Sequence[Column], out: TextIO | None = None) -> None:
    """Rows under upper-case headers, columns padded to their widest cell and three spaces
    apart (kubectl's layout); an empty cell prints as ``<none>``."""
    out = out or sys.stdout
    cells = [[h for h, _ in columns]] + [["<none>" if (v := f(r)) in (None, "") else str(v) for _, f in columns]
                                         for r in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(columns))]
    for row in cells:
        out.write("   ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() + "\n")


def age(seconds: float | None) -> str:
    """A duration the way kubectl prints ages: ``42s``, ``7m12s``, ``3h4m``, ``2d5h``."""
    if seconds is None:
        return ""
    s = max(0, int(seconds))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60}s" if s < 600 else f"{s // 60}m"
    if s < 86_400:
        return f"{s // 3600}h{(s % 3600) // 60}m"
    return f"{s // 86_400}d{(s % 86_400) // 3600}h"


def quantity(value: float | None, unit: str = "") -> str:
    """A number with at most 3 decimals, trailing zeros dropped: ``0.25``, ``2``."""
    if value is None:
        return ""
    text = f"{value:.3f}".rstrip("0").rstrip(".")
    return (text or "0") + unit
