"""Template filters for operator numbers (see :mod:`kalena_web.console.formatting`).

``{{ v|cores }}`` ``{{ v|gib }}`` ``{{ v|pct }}`` ``{{ s|clock }}`` ``{{ t|utc }}`` ``{{ s|duration }}``
``{{ n|integer }}`` ``{{ v|quantity:"ram" }}`` ``{{ mapping|get:key }}``
"""

from __future__ import annotations

from django import template

from kalena_web.console import formatting, why

register = template.Library()

register.filter("cores", formatting.cores)
register.filter("cores_text", formatting.cores_text)
register.filter("gib", formatting.gib)
register.filter("pct", formatting.pct)
register.filter("clock", formatting.clock)
register.filter("utc", formatting.utc)
register.filter("duration", formatting.duration)
register.filter("integer", formatting.integer)
register.filter("amount", formatting.amount)
register.filter("reason", why.reason_text)


@register.filter
def dimension(dim: str) -> str:
    """A dimension's name in words (``ram`` → ``memory``)."""
    return why.DIMENSIONS.get(dim, dim)


@register.filter
def cause(name: str) -> str:
    """An eviction cause in words where it is no node pressure (``node_drained`` → ``node drained``)."""
    return formatting.NOT_PRESSURE.get(name, (name or "").replace("_", " "))


@register.filter
def condition(event, _=None) -> str:
    """An eviction row's condition (``formatting.eviction_condition``)."""
    return formatting.eviction_condition(event.reason, (event.detail or {}).get("dimension"))


@register.filter
def quantity(value, dim: str) -> str:
    return formatting.quantity(dim, value)


@register.filter
def get(mapping, key):
    """``mapping[key]`` (``None`` if missing)."""
    try:
        return mapping[key]
    except (KeyError, IndexError, TypeError):
        return None


@register.simple_tag
def list_url(listing, **changes):
    """``?…`` for a :class:`~kalena_web.console.listing.Listing` with ``changes`` (e.g. ``page=2``)."""
    return listing.url(**changes)


@register.simple_tag
def list_sort(listing, key: str, label: str):
    """A column header sorting a listed table by ``key`` (ascending first, then toggles),
    keeping the search and filters."""
    from django.utils.html import format_html

    active = listing.sort == key
    arrow = (" ▼" if listing.descending else " ▲") if active else ""
    return format_html('<a class="sort{}" href="{}" title="sort by {}">{}{}</a>',
                       " active" if active else "", listing.sort_url(key), label, label, arrow)


@register.filter
def ran(pod, now_s: float) -> str:
    """How long a batch pod has run since it was bound: to its end, or to ``now_s`` while bound;
    ``–`` if it was never bound."""
    if pod.bound_s is None:
        return "–"
    end = pod.ended_s if pod.ended_s is not None else now_s
    return formatting.duration(max(0.0, end - pod.bound_s))
