"""Per-workload overrides from labels and annotations (docs/design.md §4, §5) — the one reading of them
that the node agent (its local estimate) and the control plane (estimation loop, pre-flight)
both use.

=======================================  ===========================  =============================
key                                      value                        effect
=======================================  ===========================  =============================
``kalena.naughtian.io/reclaim``          ``disabled`` | ``enabled``   ``disabled`` pins r at q
                                                                      (docs/design.md §4)
``kalena.naughtian.io/startup-grace-s``  seconds ≥ 0, e.g. ``"900"``  replaces the policy's startup
                                                                      grace g for this workload
                                                                      (docs/design.md §5)
=======================================  ===========================  =============================

Kubernetes carries them as annotations (a label is read too); Docker has only labels.
Example: ``{"kalena.naughtian.io/startup-grace-s": "0"}`` →
``WorkloadOverrides(reclaim_disabled=False, startup_grace_s=0.0)``: r may fall below q from the
first sample on; ``grace_s(300.0)`` → 0.0, and with no key ``grace_s(300.0)`` → 300.0.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from kalena_engine.errors import InputError

RECLAIM = "kalena.naughtian.io/reclaim"
STARTUP_GRACE = "kalena.naughtian.io/startup-grace-s"
KEYS = (RECLAIM, STARTUP_GRACE)


class OverrideError(InputError):
    """A per-workload override has a value Kalena does not read; ``source`` names the workload,
    ``field`` the key, ``accepted`` the values it takes."""


@dataclass(frozen=True)
class WorkloadOverrides:
    """``reclaim_disabled``: r pinned at q. ``startup_grace_s``: seconds, None = the policy's g."""

    reclaim_disabled: bool = False
    startup_grace_s: float | None = None

    def grace_s(self, policy_grace_s: float) -> float:
        """The startup grace (s) this workload gets under a policy whose grace is ``policy_grace_s``."""
        return policy_grace_s if self.startup_grace_s is None else self.startup_grace_s


def _reclaim(value: object, source: str) -> bool:
    text = str(value).strip().lower()
    if text not in ("disabled", "enabled"):
        raise OverrideError(f"{value!r} is not a reclaim setting", source=source, field=RECLAIM,
                            accepted="disabled, enabled")
    return text == "disabled"


def _grace(value: object, source: str) -> float:
    try:
        seconds = float(str(value).strip())
    except ValueError:
        seconds = math.nan
    if not math.isfinite(seconds) or seconds < 0:
        raise OverrideError(f"{value!r} is not a number of seconds ≥ 0", source=source, field=STARTUP_GRACE,
                            accepted="seconds ≥ 0, e.g. 0 or 900")
    return seconds


def workload_overrides(keys: Mapping[str, object] | None, *, source: str = "<workload>",
                       errors: list[str] | None = None) -> WorkloadOverrides:
    """Read the overrides among ``keys`` (a workload's annotations, or its labels).

    Each key is checked on its own. With ``errors=None`` a malformed value raises
    :class:`OverrideError` naming ``source``, the key and the accepted values; with a list, the
    message is appended and that key keeps its default (reclaim enabled, the policy's grace),
    so one bad annotation never takes a workload out of the ledgers.
    """
    keys = keys or {}
    out: dict[str, object] = {}
    for key, name, read in ((RECLAIM, "reclaim_disabled", _reclaim), (STARTUP_GRACE, "startup_grace_s", _grace)):
        value = keys.get(key)
        if value is None:
            continue
        try:
            out[name] = read(value, source)
        except OverrideError as exc:
            if errors is None:
                raise
            errors.append(str(exc))
    return WorkloadOverrides(**out)  # type: ignore[arg-type]


def grace_array(overrides: list[WorkloadOverrides] | tuple[WorkloadOverrides, ...], policy_grace_s: float) -> np.ndarray:
    """``(n,)`` startup grace (s) per workload: its override, else ``policy_grace_s``."""
    return np.array([o.grace_s(policy_grace_s) for o in overrides], dtype=np.float64).reshape(len(overrides))
