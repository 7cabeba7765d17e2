"""Kuberina quantity rules (the planner's parser, data/kuberina/README.md, IR v1 §1).

=================  ========  ==============================================================
dimension          IR unit   accepted spellings
=================  ========  ==============================================================
cpu                cores     number, or ``<n>m`` millicores: ``300m`` = 0.3
gpu                devices   number
ram, storage       GiB       number, or binary suffix ``Ki Mi Gi Ti``: ``512Mi`` = 0.5
disk, network      MB/s      number, or decimal suffix ``k M G``: ``500M`` = 500, ``1G`` = 1000,
                                 ``1000k`` = 1
=================  ========  ==============================================================

A decimal suffix on ram (``16G``) or a binary one on disk (``5Gi``) is an error: the two
families differ by 7 % and Kuberina refuses to guess.
"""

from __future__ import annotations

import math
import re

from kalena_engine.kuberina.yamlio import Where

_NUMBER = re.compile(r"^\s*([+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?)\s*([A-Za-z]*)\s*$")

#: suffix → multiplier into the IR unit, per dimension family.
_SUFFIXES: dict[str, dict[str, float]] = {
    "cpu": {"": 1.0, "m": 1e-3},
    "gpu": {"": 1.0},
    "binary": {"": 1.0, "Ki": 2.0**-20, "Mi": 2.0**-10, "Gi": 1.0, "Ti": 2.0**10},
    "decimal": {"": 1.0, "k": 1e-3, "M": 1.0, "G": 1e3},
}
_FAMILY = {
    "cpu": "cpu", "gpu": "gpu", "ram": "binary", "storage": "binary",
    "disk_read": "decimal", "disk_write": "decimal", "net_in": "decimal", "net_out": "decimal",
}
_ACCEPTED = {
    "cpu": "a number of cores or millicores such as 300m",
    "gpu": "a number of devices",
    "binary": "a number of GiB or a binary suffix Ki, Mi, Gi, Ti (e.g. 512Mi)",
    "decimal": "a number of MB/s or a decimal suffix k, M, G (e.g. 500M)",
}


def parse_quantity(dim: str, value: object, where: Where) -> float:
    """Parse one Kuberina quantity for dimension ``dim`` into its IR unit (see module table).

    Args:
        dim: one of ``cpu ram gpu storage disk_read disk_write net_in net_out``.
        value: a YAML scalar — int, float or string.
        where: the value's position, for error messages.

    Returns:
        The value in the dimension's IR unit (cores, GiB, devices or MB/s), finite and ≥ 0.

    Raises:
        IRError: naming the field, the value and the accepted spellings.

    Examples: ``parse_quantity("cpu", "300m", w) == 0.3``;
    ``parse_quantity("ram", "512Mi", w) == 0.5``; ``parse_quantity("net_in", "1000k", w) == 1.0``.
    """
    family = _FAMILY[dim]
    accepted = _ACCEPTED[family]
    if isinstance(value, bool) or value is None:
        raise where.error(f"{value!r} is not a quantity", accepted=accepted)
    if isinstance(value, int | float):
        number, suffix = float(value), ""
    elif isinstance(value, str):
        match = _NUMBER.match(value)
        if not match:
            raise where.error(f"{value!r} is not a quantity", accepted=accepted)
        number, suffix = float(match.group(1)), match.group(2)
    else:
        raise where.error(f"{value!r} is not a quantity", accepted=accepted)
    scale = _SUFFIXES[family].get(suffix)
    if scale is None:
        raise where.error(f"{value!r} has suffix {suffix!r}, not valid for {dim}", accepted=accepted)
    result = number * scale
    if not math.isfinite(result) or result < 0:
        raise where.error(f"{value!r} must be a finite, non-negative quantity", accepted=accepted)
    return result
