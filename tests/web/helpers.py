"""Helpers for console tests: read what a page shows (figures, table cells) the way a browser
would, without a browser."""

from __future__ import annotations

import base64
import html
import json
import re

import numpy as np

_SCRIPT = r'<script type="application/json" id="{id}">(.*?)</script>'


def figure(page: str, figure_id: str) -> dict:
    """The Plotly figure embedded in ``page`` under ``<script id=figure_id>``, with every
    base64 typed array (``{"dtype", "bdata"}``) decoded to a numpy array."""
    match = re.search(_SCRIPT.format(id=re.escape(figure_id)), page, re.S)
    assert match, f"no figure {figure_id!r} in the page"
    return _decode(json.loads(match.group(1)))


def _decode(value):
    if isinstance(value, dict):
        if set(value) >= {"dtype", "bdata"}:
            return np.frombuffer(base64.b64decode(value["bdata"]), dtype=np.dtype(value["dtype"]))
        return {k: _decode(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_decode(v) for v in value]
    return value


def traces(fig: dict, axis: str = "y") -> dict[str, dict]:
    """``{trace name: trace}`` for the traces on y axis ``axis`` (``y`` top panel, ``y2`` bottom)."""
    return {t["name"]: t for t in fig["data"] if t.get("yaxis", "y") == axis}


def cells(page: str, row_attr: str, value: str) -> list[str]:
    """Texts of the ``<td>``/``<th>`` cells of the table row carrying ``row_attr="value"``."""
    match = re.search(rf'<tr[^>]*{row_attr}="{re.escape(html.escape(value))}"[^>]*>(.*?)</tr>', page, re.S)
    assert match, f"no row {row_attr}={value!r}"
    return [text(c) for c in re.findall(r"<t[dh][^>]*>(.*?)</t[dh]>", match.group(1), re.S)]


def text(fragment: str) -> str:
    """Visible text of an HTML fragment, whitespace collapsed."""
    return " ".join(html.unescape(re.sub(r"<[^>]+>", " ", fragment)).split())


def row_order(page: str, attr: str) -> list[str]:
    """Values of ``attr`` on table rows, in page order."""
    return [html.unescape(v) for v in re.findall(rf'<tr[^>]*\s{attr}="([^"]+)"', page)]
