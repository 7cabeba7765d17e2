"""Why-pending records (engine ``WhyPending.to_dict()``) shaped for reading: reasons in an
operator's words instead of the engine's kinds, amounts with as many decimals as it takes for a
shortfall to show, and a reduction sentence that says how many nodes it opens.

Examples::

    reason_text("telemetry_stale") → "telemetry stale: no fresh sample from the node's agent"
    rejection_lines({"rejections": [{"kind": "cpu", "node": "n1", "requested": 0.5, "free": 0.49978,
                                     "shortfall": 0.00022, "unit": "cores"}]})
      → ["n1: needs 0.5 cores of CPU, has 0.49978 free (short by 0.00022 cores)"]
"""

from __future__ import annotations

import math

from kalena_web.console.formatting import _number, amount, utc

#: the engine's reason kinds (kalena_engine.placement.reasons, and the dimension names) in words
REASONS = {
    "cpu": "not enough CPU slack", "ram": "not enough memory slack", "gpu": "not enough GPU slack",
    "storage": "not enough storage slack", "disk_read": "not enough disk-read slack",
    "disk_write": "not enough disk-write slack", "net_in": "not enough network-in slack",
    "net_out": "not enough network-out slack",
    "node_not_ready": "node not ready",
    "telemetry_stale": "telemetry stale: no fresh sample from the node's agent",
    "slack_ineligible": "kept off batch (outside the batch node set, or cooling down after pressure)",
    "cooldown": "cooling down after a batch eviction of the same owner",
    "node_selector": "node selector or node affinity does not match",
    "taint": "a taint the pod does not tolerate",
    "production_anti_affinity": "a production pod's anti-affinity keeps batch away",
    "batch_anti_affinity": "the pod's own anti-affinity",
    "topology_spread": "topology spread would be exceeded",
    "namespace_cap": "the namespace's batch cap is reached",
    "gang": "its gang does not fit whole",
    "stale_binding": "the node changed between decision and bind",
    "releasing": "terminating pods the kubelet still counts",
    "kubelet_allocatable": "the node's published batch allocatable is not raised yet",
    "no_nodes": "the cluster has no nodes",
    "bind_refused": "the node's engine refused to run it (backing off before the next attempt)",
}
DIMENSIONS = {"cpu": "CPU", "ram": "memory", "gpu": "GPU", "net_in": "network in", "net_out": "network out",
              "disk_read": "disk read", "disk_write": "disk write"}


def reason_text(kind: str | None) -> str:
    """The reason ``kind`` in words; an unknown kind reads with its underscores as spaces."""
    if not kind:
        return "–"
    return REASONS.get(kind, kind.replace("_", " "))


def _decimals(shortfall: float, base: int = 2, most: int = 6) -> int:
    """Decimals for a requested/free pair whose difference is ``shortfall``: ``base``, or as
    many more as it takes for the difference to show (0.00022 → 5), at most ``most``."""
    if not shortfall or not math.isfinite(shortfall) or abs(shortfall) >= 10.0 ** -base:
        return base
    return min(most, max(base, -math.floor(math.log10(abs(shortfall))) + 1))


def pair(requested: float, free: float, shortfall: float) -> tuple[str, str]:
    """``requested`` and ``free`` to the same number of decimals, enough that a shortfall
    below the display precision still shows between them: ``(0.5, 0.49978, 0.00022)`` →
    ``("0.5", "0.49978")``; ``(2.0, 1.25, 0.75)`` → ``("2", "1.25")``."""
    d = _decimals(shortfall)
    return _number(requested, d), _number(free, d)


def _detail(r: dict) -> str:
    kind = r.get("kind", "")
    if kind == "taint":
        return f"taint {r.get('key')}={r.get('value')}:{r.get('effect')} not tolerated"
    if kind == "node_selector":
        if r.get("affinity"):
            return f"node affinity {r['affinity']} does not match"
        found = "absent" if r.get("found") is None else f"“{r['found']}”"
        return f"label {r.get('key')} should be “{r.get('wanted')}”, is {found}"
    if kind == "cooldown":
        return f"batch of {r.get('owner')} was evicted here at {utc(r.get('evicted_s'))} UTC; cooling down until " \
               f"{utc(r.get('until_s'))} UTC"
    if kind in ("production_anti_affinity", "batch_anti_affinity"):
        return f"{reason_text(kind)} ({r.get('pod')}: {r.get('rule')})"
    if kind == "topology_spread":
        return f"placing here would make {r.get('topology_key')}={r.get('domain')} hold {(r.get('count') or 0) + 1} " \
               f"against {r.get('min_count')} elsewhere (max skew {r.get('max_skew')})"
    if kind == "namespace_cap":
        return f"namespace {r.get('namespace')} already runs {r.get('running')} of its {r.get('cap')} batch pods"
    if kind == "gang":
        return f"gang {r.get('gang')}: only {r.get('placeable')} of the {r.get('min_member')} pods it needs fit, " \
               "so none is placed"
    if kind == "stale_binding":
        return f"ledger moved from version {r.get('expected_version')} to {r.get('found_version')}; requeued"
    if kind in ("releasing", "kubelet_allocatable"):
        unit, dim = r.get("unit", ""), DIMENSIONS.get(r.get("dim", ""), r.get("dim", ""))
        requested, free = pair(r.get("requested", 0.0), r.get("free", 0.0),
                               (r.get("requested") or 0.0) - (r.get("free") or 0.0))
        text = f"the node's own admission has {free} {unit} of {dim} for {requested} {unit} requested"
        if r.get("releasing"):
            text += f": terminating {', '.join(r['releasing'])} still hold {amount(r.get('releasing_amount'))} {unit}"
        return text
    return reason_text(kind)


def rejection_lines(record: dict) -> list[str]:
    """The why-pending record's typed rejection examples as sentences an operator reads; first,
    each node that refused to run the pod, with the engine's words, and the next attempt."""
    from kalena_web.scheduling.whypending import refusal_lines

    lines = refusal_lines(record)
    for r in record.get("rejections") or []:
        node = r.get("node") or "the gang"
        if "shortfall" in r:
            dim = DIMENSIONS.get(r.get("dim", r.get("kind", "")), r.get("kind", "?"))
            requested, free = pair(r["requested"], r["free"], r["shortfall"])
            lines.append(f"{node}: needs {requested} {r['unit']} of {dim}, has {free} free "
                         f"(short by {amount(r['shortfall'])} {r['unit']})")
        else:
            lines.append(f"{node}: {_detail(r)}")
    return lines


UNITS = {"cpu": "cores", "ram": "GiB", "storage": "GiB", "gpu": "devices"}


def reduction_text(record: dict) -> str:
    """The reduction as a sentence: by how much, which node it opens and how many in all.

    A node fits only when every dimension is lowered enough, so nodes short by the same amount
    of one dimension can still lack another — the sentence says so when the reduction opens the
    one node only. ``""`` when the record has no reduction (no node passes the rules)."""
    reduction = record.get("reduction")
    if not reduction or not reduction.get("by"):
        return ""
    parts = [f"{amount(v)} {UNITS.get(d, 'MB/s')} of {DIMENSIONS.get(d, d)}" for d, v in reduction["by"].items()]
    fits = int(reduction.get("fits_nodes") or 0)
    where = reduction.get("node", "?")
    if fits <= 1 and len(parts) == 1:
        tail = f"{where} only — every other node is short by more"
    elif fits <= 1:
        tail = f"{where} only — every other node lacks more of at least one dimension"
    else:
        tail = f"{where} and {fits - 1} other node{'s' if fits > 2 else ''}"
    return f"Lowering the request by {' and '.join(parts)} would let it fit on {tail}."


#: the node agent's cpu actions on batch (docs/agent.md "action" messages) the live node page lists
THROTTLE_ACTIONS = ("throttle", "cpu_weight", "starvation_cap", "starvation_release")


def _cores(mcpu) -> str:
    return _number((mcpu or 0.0) / 1000.0, 3)


def throttle_text(action: str, reason: str, numbers: dict) -> str:
    """One agent cpu action on the node in an operator's words, with its numbers.

    Examples::

        throttle_text("throttle", "cpu_budget", {"quota_us": 15000, "period_us": 100000,
                      "share_mcpu": 150, "budget_mcpu": 200, "capacity_mcpu": 390,
                      "service_claim_mcpu": 190})
          → "cpu quota set to 0.15 cores: its share of the 0.2 cores batch may use while
             production claims 0.19 of the node's 0.39"
        throttle_text("throttle", "cpu_budget", {"quota_us": 10000, "period_us": 100000,
                      "share_mcpu": 100, "budget_mcpu": 1200, "capacity_mcpu": 290,
                      "service_claim_mcpu": 250})
          → "cpu quota set to 0.1 cores: the floor each batch pod keeps (1.2 cores in all, more
             than the 0.04 production leaves of the node's 0.29); production is kept ahead by
             cpu weight"
        throttle_text("cpu_weight", "cpu_contention", {"weight": 1, "contended_services": ["a/b"]})
          → "cpu weight lowered to 1 while production (a/b) waits for cpu"

    The budget is ``max(min_batch_cpu · n_batch, C − Σ claims)`` (docs/design.md §7): when the
    floor is the larger, the quotas add up to more than the node has left, and the text says so
    rather than naming a share of a budget the node cannot hold.
    """
    n = numbers or {}
    if action == "throttle":
        period = n.get("period_us") or 0
        quota = f"{_number(n['quota_us'] / period, 3)} cores" if period and n.get("quota_us") is not None else "no limit"
        text = f"cpu quota set to {quota}"
        budget, capacity, claim = n.get("budget_mcpu"), n.get("capacity_mcpu"), n.get("service_claim_mcpu")
        left = None if capacity is None or claim is None else max(0.0, capacity - claim)
        if budget is not None and left is not None and budget > left + 0.5:    # the floor decided (mcpu)
            text += (f": the floor each batch pod keeps ({_cores(budget)} cores in all, more than the "
                     f"{_cores(left)} production leaves of the node's {_cores(capacity)}); production is kept "
                     f"ahead by cpu weight")
        elif budget is not None:
            text += f": its share of the {_cores(budget)} cores batch may use"
            if capacity is not None:
                text += f" while production claims {_cores(claim)} of the node's {_cores(capacity)}"
        return text
    contended = ", ".join(n.get("contended_services") or [])
    if action == "cpu_weight":
        if reason == "cpu_contention":
            return f"cpu weight lowered to {n.get('weight')}" + (
                f" while production ({contended}) waits for cpu" if contended else " while production waits for cpu")
        return f"cpu weight restored to {n.get('weight')}: production no longer waits"
    if action == "starvation_cap":
        return "anti-starvation: batch was throttled too long, so production above its request is capped"
    if action == "starvation_release":
        return "anti-starvation cap released"
    return f"{action.replace('_', ' ')} ({reason.replace('_', ' ')})"
