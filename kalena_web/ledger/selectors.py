"""Ledger reads: the nodes table of a run, sortable by slack, headroom and usage."""

from __future__ import annotations

from dataclasses import dataclass

from django.db.models import QuerySet

from kalena_web.archive.models import Run
from kalena_web.ledger.models import NodeLedger


@dataclass(frozen=True)
class Sort:
    """A way to order the nodes table: ``key`` in URLs, ``label`` for people."""

    key: str
    label: str
    fields: tuple[str, ...]


#: Accepted ``?sort=`` keys (prefix ``-`` for descending). Ties break on the node's row.
SORTS: dict[str, Sort] = {s.key: s for s in (
    Sort("name", "node name", ("node__name",)),
    Sort("slack_cpu", "mean cpu slack", ("slack_mean_cpu_mcpu",)),
    Sort("slack_ram", "mean ram slack", ("slack_mean_ram_bytes",)),
    Sort("min_slack_cpu", "minimum cpu slack", ("slack_min_cpu_mcpu",)),
    Sort("min_slack_ram", "minimum ram slack", ("slack_min_ram_bytes",)),
    Sort("headroom_cpu", "cpu headroom", ("headroom_cpu_mcpu",)),
    Sort("headroom_ram", "ram headroom", ("headroom_ram_bytes",)),
    Sort("usage_cpu", "mean cpu usage (share of capacity)", ("usage_mean_cpu_ratio",)),
    Sort("usage_ram", "mean ram usage (share of capacity)", ("usage_mean_ram_ratio",)),
    Sort("reclaimed_cpu", "mean reclaimed cpu in use", ("reclaimed_mean_cpu_mcpu",)),
    Sort("reclaimed_ram", "mean reclaimed ram in use", ("reclaimed_mean_ram_bytes",)),
    Sort("evicted", "batch instances evicted", ("batch_evicted",)),
)}


class BadSort(ValueError):
    """A ``sort`` value that is not one of :data:`SORTS` (optionally prefixed with ``-``)."""


def sort_parse(value: str | None, default: str = "name") -> tuple[str, bool]:
    """``(key, descending)`` for a ``?sort=`` value.

    Raises:
        BadSort: naming the value and the accepted keys.
    """
    value = (value or default).strip()
    descending = value.startswith("-")
    key = value[1:] if descending else value
    if key not in SORTS:
        raise BadSort(f"unknown sort {value!r}; accepted: {', '.join(SORTS)} (prefix '-' for descending)")
    return key, descending


def node_table(*, run: Run, sort: str = "name", descending: bool = False) -> QuerySet[NodeLedger]:
    """Every node's ledger of ``run`` with its node, in one query, ordered by ``sort``."""
    fields = SORTS[sort].fields
    order = [f"-{f}" if descending else f for f in fields] + ["node__row"]
    return NodeLedger.objects.filter(run=run).select_related("node").order_by(*order)
