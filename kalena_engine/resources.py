"""Resource vectors and units (docs/design.md §2).

Every resource quantity in Kalena is a float64 numpy array whose last axis has the eight
dimensions below, in this order. Internal units are chosen so that nothing needs a scale
factor inside the engine: millicores, bytes, devices, bytes per second.

=====  ===========  ==============  ================  ================  =======
index  name         internal unit   Kuberina IR unit  class             slack?
=====  ===========  ==============  ================  ================  =======
0      cpu          mcpu            cores             compressible      yes
1      ram          bytes           GiB               non-compressible  yes
2      gpu          devices         devices           non-reclaimable   never
3      storage      bytes           GiB               non-compressible  yes
4      disk_read    bytes/s         MB/s              compressible      yes
5      disk_write   bytes/s         MB/s              compressible      yes
6      net_in       bytes/s         MB/s              compressible      yes
7      net_out      bytes/s         MB/s              compressible      yes
=====  ===========  ==============  ================  ================  =======

An unconstrained capacity is ``+inf``; demand is never infinite.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

DIMS: tuple[str, ...] = (
    "cpu", "ram", "gpu", "storage", "disk_read", "disk_write", "net_in", "net_out",
)
N_DIMS = len(DIMS)
CPU, RAM, GPU, STORAGE, DISK_READ, DISK_WRITE, NET_IN, NET_OUT = range(N_DIMS)
DIM_INDEX: dict[str, int] = {name: i for i, name in enumerate(DIMS)}

INTERNAL_UNITS: tuple[str, ...] = (
    "mcpu", "bytes", "devices", "bytes", "bytes/s", "bytes/s", "bytes/s", "bytes/s",
)
IR_UNITS: tuple[str, ...] = ("cores", "GiB", "devices", "GiB", "MB/s", "MB/s", "MB/s", "MB/s")

GIB = float(2**30)
MB = 1e6
#: Multiply a vector in Kuberina IR units by this to get internal units.
IR_TO_INTERNAL = np.array([1000.0, GIB, 1.0, GIB, MB, MB, MB, MB])

#: Dimensions whose shortage is relieved by throttling (cpu; disk and net are advisory).
COMPRESSIBLE = np.array([True, False, False, False, True, True, True, True])
#: Dimensions whose idle capacity may be lent to batch. GPU is never reclaimed.
RECLAIMABLE = np.array([True, True, False, True, True, True, True, True])


def zeros(*shape: int) -> np.ndarray:
    """Return a zero resource array of shape ``(*shape, 8)``."""
    return np.zeros((*shape, N_DIMS), dtype=np.float64)


def vector(**values: float) -> np.ndarray:
    """Build one ``(8,)`` vector in internal units from keyword dims, e.g. ``vector(cpu=500)``.

    Raises:
        KeyError: for a name that is not one of :data:`DIMS`.
    """
    out = zeros()
    for name, value in values.items():
        out[DIM_INDEX[name]] = value
    return out


def ir_vector(**values: float) -> np.ndarray:
    """Build one ``(8,)`` internal-unit vector from IR units, e.g. ``ir_vector(cpu=2, ram=4)``."""
    return vector(**values) * IR_TO_INTERNAL


def to_ir(values: np.ndarray) -> np.ndarray:
    """Convert internal units to Kuberina IR units; shape is preserved ``(..., 8)``."""
    return np.asarray(values, dtype=np.float64) / IR_TO_INTERNAL


def to_ir_block(values: np.ndarray) -> dict[str, object]:
    """Render one ``(8,)`` internal-unit vector as a Kuberina resource block (IR units).

    Unconstrained (+inf) dimensions are omitted, as the IR spells "unconstrained".
    Example: ``to_ir_block(ir_vector(cpu=2, disk_read=5))`` →
    ``{"cpu": 2.0, "ram": 0.0, "gpu": 0.0, "storage": 0.0, "disk": {"read": 5.0, "write": 0.0},
    "network": {"in": 0.0, "out": 0.0}}``.
    """
    ir = to_ir(values)
    block: dict[str, object] = {}
    for name in ("cpu", "ram", "gpu", "storage"):
        value = ir[DIM_INDEX[name]]
        if np.isfinite(value):
            block[name] = round(float(value), 6)
    for outer, pairs in (("disk", ("read", "write")), ("network", ("in", "out"))):
        inner = {}
        for short in pairs:
            dim = ("disk_" if outer == "disk" else "net_") + short
            value = ir[DIM_INDEX[dim]]
            if np.isfinite(value):
                inner[short] = round(float(value), 6)
        if inner:
            block[outer] = inner
    return block


def as_dict(values: np.ndarray) -> dict[str, float]:
    """Return ``{dim: value}`` for one ``(8,)`` vector, keeping its units."""
    return {name: float(values[i]) for i, name in enumerate(DIMS)}


def from_dict(values: Mapping[str, float]) -> np.ndarray:
    """Inverse of :func:`as_dict`; missing dims are 0."""
    return vector(**dict(values))


def format_quantity(dim: int | str, value: float) -> str:
    """Format one internal-unit value for an operator, in the IR unit: ``"61.75 cores"``."""
    index = DIM_INDEX[dim] if isinstance(dim, str) else dim
    if not np.isfinite(value):
        return "unconstrained"
    ir = value / IR_TO_INTERNAL[index]
    text = f"{ir:,.3f}".rstrip("0").rstrip(".")
    return f"{text} {IR_UNITS[index]}"
