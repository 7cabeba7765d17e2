"""``kalena evaluate policies``, the pure half: one replay configuration per reservation rule
(same inputs, seed, scheduler and node-local mitigation; only the rule swapped, docs/design.md §11),
then the comparison — harvest against the two oracles and the table an operator reads.

Harvest ratio of a policy against an oracle, per dimension::

    harvest_ratio_vs_oracle_60m = reclaimed_fraction_cpu(policy) / reclaimed_fraction_cpu(oracle-60m)

(``_ram`` variants on ram); ``None`` when the oracle was not run or reclaimed nothing.
Example: Kalena 12.9 % of cpu requests in reclaimed capacity, oracle-60m 14.3 % → 0.902.
"""

from __future__ import annotations

from dataclasses import replace

from kalena_engine.replay.rules import RULES
from kalena_engine.replay.setup import ReplayConfig

ORACLES = (("oracle_60m", "oracle-60m"), ("oracle_exact", "oracle-exact"))

#: Columns of the printed table: (summary key, header, format).
TABLE_COLUMNS: tuple[tuple[str, str, str], ...] = (
    ("reclaimed_fraction_cpu", "reclaimed cpu", "{:.2%}"),
    ("reclaimed_fraction_ram", "reclaimed ram", "{:.2%}"),
    ("harvest_ratio_vs_oracle_60m", "vs oracle-60m", "{:.3f}"),
    ("harvest_ratio_vs_oracle_exact", "vs oracle-exact", "{:.3f}"),
    ("batch_completed", "batch completed", "{:,}"),
    ("batch_evicted", "batch evicted", "{:,}"),
    ("batch_evictions_per_100_pod_hours", "evictions /100 pod-h", "{:.3f}"),
    ("production_evictions", "prod evictions", "{:,}"),
    ("production_contention_core_hours", "prod contention core-h", "{:,.1f}"),
    ("production_contention_node_steps", "contention node-steps", "{:,}"),
    ("oom_kills", "OOM kills", "{:,}"),
    ("production_oom_kills", "prod OOM kills", "{:,}"),
    ("throttled_batch_core_hours", "throttled core-h", "{:,.1f}"),
    ("completion_inflation_p99", "inflation p99", "{:.3f}"),
    ("escalations", "escalations", "{:,}"),
)


def policy_configs(base: ReplayConfig, rules: tuple[str, ...] = RULES) -> dict[str, ReplayConfig]:
    """One configuration per rule, identical but for ``reservation_rule``.

    Raises:
        ValueError: an unknown or repeated rule name.
    """
    if len(set(rules)) != len(rules):
        raise ValueError(f"a policy is named twice in {', '.join(rules)}")
    for name in rules:
        if name not in RULES:
            raise ValueError(f"policy {name!r} is not one of {', '.join(RULES)}")
    return {name: replace(base, reservation_rule=name) for name in rules}


def _ratio(value: float, reference: float | None) -> float | None:
    if reference is None or reference <= 0:
        return None
    return round(value / reference, 4)


def with_harvest_ratios(summaries: dict[str, dict[str, object]]) -> dict[str, dict[str, object]]:
    """Every summary plus ``harvest_ratio_vs_oracle_{60m,exact}`` (cpu) and their ``_ram``
    variants (module doc); the input is not modified."""
    out = {}
    for name, summary in summaries.items():
        row = dict(summary)
        for key, oracle in ORACLES:
            ref = summaries.get(oracle)
            for dim, suffix in (("cpu", ""), ("ram", "_ram")):
                reference = None if ref is None else float(ref[f"reclaimed_fraction_{dim}"])
                row[f"harvest_ratio_vs_{key}{suffix}"] = _ratio(float(summary[f"reclaimed_fraction_{dim}"]), reference)
        out[name] = row
    return out


def format_table(summaries: dict[str, dict[str, object]]) -> str:
    """The comparison as a fixed-width text table, one row per policy in input order."""
    headers = ["policy"] + [h for _, h, _ in TABLE_COLUMNS]
    rows = []
    for name, summary in summaries.items():
        cells = [name]
        for key, _, fmt in TABLE_COLUMNS:
            value = summary.get(key)
            cells.append("—" if value is None else fmt.format(value))
        rows.append(cells)
    widths = [max(len(r[i]) for r in [headers, *rows]) for i in range(len(headers))]
    lines = ["  ".join(h.rjust(w) if i else h.ljust(w) for i, (h, w) in enumerate(zip(headers, widths, strict=True)))]
    lines.append("  ".join("-" * w for w in widths))
    for r in rows:
        lines.append("  ".join(c.rjust(w) if i else c.ljust(w) for i, (c, w) in enumerate(zip(r, widths, strict=True))))
    return "\n".join(lines)


def format_markdown_table(summaries: dict[str, dict[str, object]]) -> str:
    """The same table in Markdown (for the docs)."""
    headers = ["policy"] + [h for _, h, _ in TABLE_COLUMNS]
    lines = ["| " + " | ".join(headers) + " |", "|" + "|".join(["---"] + ["---:"] * len(TABLE_COLUMNS)) + "|"]
    for name, summary in summaries.items():
        cells = [f"`{name}`"]
        for key, _, fmt in TABLE_COLUMNS:
            value = summary.get(key)
            cells.append("—" if value is None else fmt.format(value))
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _q(summary: dict[str, object], *path: str) -> object:
    node: object = summary
    for key in path:
        if not isinstance(node, dict) or key not in node:
            return None
        node = node[key]
    return node


#: Columns of the metrics 6–8 table (proposal §6.3): (header, path into the summary, format).
PROPOSAL_COLUMNS: tuple[tuple[str, tuple[str, ...], str], ...] = (
    ("over-est area cpu", ("overestimation_area_cpu",), "{:.3f}"),
    ("over-est area ram", ("overestimation_area_ram",), "{:.3f}"),
    ("under-est area cpu", ("underestimation_area_cpu",), "{:.4f}"),
    ("r/q cpu p50", ("reservation_accuracy", "cpu", "reservation_over_request", "quantiles", "p50"), "{:.2f}"),
    ("u/q cpu p50", ("reservation_accuracy", "cpu", "usage_over_request", "quantiles", "p50"), "{:.2f}"),
    ("u/q cpu p99", ("reservation_accuracy", "cpu", "usage_over_request", "quantiles", "p99"), "{:.2f}"),
    ("inflation p50/p90/p99", (), ""),
    ("throttled s p50/p99/max", (), ""),
    ("slowed share", ("batch_forward_progress", "slowed_share"), "{:.2%}"),
    ("reserve yield cpu", ("pareto_reserve_yield_cpu",), "{:.1%}"),
    ("reserve yield ram", ("pareto_reserve_yield_ram",), "{:.1%}"),
    ("per-node cpu p10/p50/p90", (), ""),
)


def _triple(summary: dict[str, object], path: tuple[str, ...], keys: tuple[str, ...], fmt: str) -> str:
    quantiles = _q(summary, *path)
    if not isinstance(quantiles, dict) or not quantiles:
        return "—"
    return "/".join(fmt.format(quantiles[k]) if k in quantiles else "—" for k in keys)


def format_proposal_table(summaries: dict[str, dict[str, object]]) -> str:
    """The proposal's metrics 6–8 (:mod:`~kalena_engine.replay.proposal_metrics`) as a
    fixed-width table, one row per run: reservation accuracy (over/under-estimation areas, r/q
    and u/q medians), batch forward progress (inflation and throttled seconds per completed
    instance), Pareto-reserve yield (cluster and per-node quantiles)."""
    headers = ["policy"] + [h for h, _, _ in PROPOSAL_COLUMNS]
    rows = []
    for name, summary in summaries.items():
        cells = [name]
        for header, path, fmt in PROPOSAL_COLUMNS:
            if header.startswith("inflation"):
                cells.append(_triple(summary, ("batch_forward_progress", "completion_inflation", "quantiles"),
                                     ("p50", "p90", "p99"), "{:.3f}"))
            elif header.startswith("throttled"):
                cells.append(_triple(summary, ("batch_forward_progress", "throttled_seconds", "quantiles"),
                                     ("p50", "p99", "p100"), "{:,.0f}"))
            elif header.startswith("per-node"):
                cells.append(_triple(summary, ("pareto_reserve_yield", "cpu", "per_node"), ("p10", "p50", "p90"),
                                     "{:.2f}"))
            else:
                value = _q(summary, *path)
                cells.append("—" if value is None else fmt.format(value))
        rows.append(cells)
    widths = [max(len(r[i]) for r in [headers, *rows]) for i in range(len(headers))]
    lines = ["  ".join(h.rjust(w) for h, w in zip(headers, widths, strict=True)), "  ".join("-" * w for w in widths)]
    lines += ["  ".join(c.rjust(w) for c, w in zip(r, widths, strict=True)) for r in rows]
    return "\n".join(lines)
